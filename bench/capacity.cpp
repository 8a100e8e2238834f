// The capacity report (docs/capacity.md): a real runner driven by N concurrent clients, each
// submitting one job after another from a standard mix, for a fixed time per level, at rising N.
// Every figure is also given as a ratio against the single-client level of the same run
// (bench/README.md: no bare absolute-time claims), and the verdict is derived from the ratios.
//
//   motor_bench_capacity [seconds-per-level] [levels] [max_running_jobs] [--json FILE]
//     seconds-per-level  default 20
//     levels             comma-separated client counts, default 1,2,4,8,16 (the first is the baseline)
//     max_running_jobs   the runner's admission limit, default the runner's own default
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "support/runner_harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

// The standard job mix. Each client walks the list from its own offset, so at any moment the
// running jobs are a blend of all kinds.
struct JobKind {
  const char* name;
  const char* what;
};
constexpr JobKind kKinds[] = {
    {"short", "echo ok"},
    {"cpu", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"},
    {"io", "head -c 8388608 /dev/zero > io.{tag}; sync io.{tag}; wc -c < io.{tag}; rm -f io.{tag}"},
    {"output", "seq 1 50000"},
    {"memcap", "x=$(head -c 4000000 /dev/zero | tr '\\000' a); echo ${{#x}}"},
};
constexpr size_t kKindCount = std::size(kKinds);

std::string job_request(size_t kind, int id, const std::string& tag) {
  const std::string cmd = fmt::format(fmt::runtime(kKinds[kind].what), fmt::arg("tag", tag));
  std::string escaped;
  for (char c : cmd) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  const std::string memory = std::string(kKinds[kind].name) == "memcap" ? R"(,"memory":"64M")" : "";
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"{}","timeout":600{}}}}})", id, escaped,
                     memory);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct JobResult {
  size_t kind = 0;
  bool completed = false;    // a terminal record that is not a refusal
  bool in_window = false;    // the terminal arrived before the level's deadline
  std::string refusal;       // the reason, for a refusal (terminal or error record)
  std::string outcome;
  double start_ms = -1;      // request sent -> `started` record
  double wall_ms = -1;       // request sent -> terminal record
  double queue_wait_ms = -1; // as the runner reported it
};

// One job through a fresh connection (as one `motor run` would): its timings and outcome.
JobResult run_job(const std::string& socket, size_t kind, int id, const std::string& tag, Clock::time_point deadline,
                  simdjson::dom::parser& parser) {
  JobResult r;
  r.kind = kind;
  RawClient c(socket);
  if (!c.connected()) {
    r.refusal = "connect_failed";
    return r;
  }
  const auto t0 = Clock::now();
  if (!c.send_frame(job_request(kind, id, tag))) {
    r.refusal = "send_failed";
    return r;
  }
  auto ms_since = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(600000));
    if (!f) {
      r.refusal = "connection_lost";
      return r;
    }
    simdjson::dom::element root;
    if (parser.parse(*f).get(root)) {
      r.refusal = "invalid_record";
      return r;
    }
    std::string_view type;
    if (root["type"].get_string().get(type)) {
      // A reply without a type: an error reply (e.g. runner_full for too many sessions).
      std::string_view code;
      if (!root.at_pointer("/error/code").get_string().get(code)) {
        r.refusal = std::string(code);
        return r;
      }
      continue;
    }
    if (type == "started") {
      r.start_ms = ms_since();
      int64_t wait = 0;
      if (!root["queue_wait_ms"].get_int64().get(wait)) r.queue_wait_ms = static_cast<double>(wait);
    } else if (type == "terminal") {
      r.wall_ms = ms_since();
      r.in_window = Clock::now() <= deadline;
      std::string_view outcome;
      if (root.at_pointer("/outcome/type").get_string().get(outcome)) outcome = "unknown";
      r.outcome = std::string(outcome);
      if (outcome == "refused_before_start") {
        std::string_view reason;
        if (root.at_pointer("/outcome/reason").get_string().get(reason)) reason = "unknown";
        r.refusal = std::string(reason);
      } else {
        r.completed = true;
      }
      return r;
    }
  }
}

// The runner's own CPU time (user + system, not its jobs'), in seconds, and its resident memory.
double process_cpu_seconds(pid_t pid) {
  const std::string text = motor::test::read_file(fmt::format("/proc/{}/stat", pid));
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(close_paren + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::atof(f.c_str());
    if (i == 15) {
      stime = std::atof(f.c_str());
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double process_rss_mib(pid_t pid) {
  const std::string text = motor::test::read_file(fmt::format("/proc/{}/status", pid));
  const size_t at = text.find("\nVmRSS:");
  return at == std::string::npos ? 0 : std::atof(text.c_str() + at + 7) / 1024.0;
}

std::string loadavg() {
  std::string text = motor::test::read_file("/proc/loadavg");
  size_t end = 0;
  for (int fields = 0; fields < 3 && end != std::string::npos; ++fields) end = text.find(' ', end + (fields ? 1 : 0));
  return text.substr(0, end);
}

double runner_stall_us(const std::string& socket, bool reset) {
  RawClient s(socket);
  s.send_frame(reset ? R"({"id":1,"method":"runner.status","params":{"reset_stall":true}})"
                     : R"({"id":1,"method":"runner.status","params":{}})");
  auto reply = s.read_frame();
  return reply ? std::atof(json_field(*reply, "/result/loop_worst_stall_us").c_str()) : -1;
}

struct Level {
  int clients = 0;
  double seconds = 0;
  int completed = 0;
  std::map<std::string, int> refusals;  // reason -> count
  std::vector<double> start_ms, wall_ms, queue_wait_ms;
  std::vector<double> wall_ms_by_kind[kKindCount];
  std::map<std::string, int> outcomes;
  double stall_us = 0;
  double runner_cpu_s = 0;
  double runner_rss_mib = 0;
  std::string load;

  double jobs_per_min() const { return seconds > 0 ? completed * 60.0 / seconds : 0; }
  int refused() const {
    int n = 0;
    for (const auto& [reason, count] : refusals) n += count;
    return n;
  }
};

Level run_level(const RunnerProcess& runner, int clients, double seconds, int& next_id) {
  Level level;
  level.clients = clients;
  runner_stall_us(runner.socket(), true);
  const double cpu0 = process_cpu_seconds(runner.pid());
  std::mutex mu;
  std::vector<JobResult> results;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<int> ids{next_id};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      simdjson::dom::parser parser;
      size_t kind = static_cast<size_t>(c) % kKindCount;
      for (int n = 0; Clock::now() < deadline; ++n) {
        const int id = ids++;
        JobResult r = run_job(runner.socket(), kind, id, fmt::format("{}-{}-{}", clients, c, n), deadline, parser);
        const bool refused = !r.refusal.empty();
        {
          std::lock_guard lock(mu);
          results.push_back(std::move(r));
        }
        kind = (kind + 1) % kKindCount;
        // A refused client backs off briefly instead of hammering the runner.
        if (refused) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  for (auto& t : threads) t.join();
  level.seconds = seconds;
  next_id = ids;
  level.runner_cpu_s = process_cpu_seconds(runner.pid()) - cpu0;
  level.runner_rss_mib = process_rss_mib(runner.pid());
  level.stall_us = runner_stall_us(runner.socket(), false);
  level.load = loadavg();
  for (const JobResult& r : results) {
    if (!r.refusal.empty()) {
      ++level.refusals[r.refusal];
      continue;
    }
    ++level.outcomes[r.outcome];
    if (r.completed && r.in_window) ++level.completed;
    if (r.start_ms >= 0) level.start_ms.push_back(r.start_ms);
    if (r.queue_wait_ms >= 0) level.queue_wait_ms.push_back(r.queue_wait_ms);
    if (r.wall_ms >= 0) {
      level.wall_ms.push_back(r.wall_ms);
      level.wall_ms_by_kind[r.kind].push_back(r.wall_ms);
    }
  }
  return level;
}

std::vector<int> parse_levels(const std::string& s) {
  std::vector<int> out;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    const int n = std::atoi(part.c_str());
    if (n > 0) out.push_back(n);
  }
  return out;
}

std::string ratio(double value, double base) { return base > 0 ? fmt::format("{:.2f}", value / base) : "-"; }

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20;
  std::vector<int> levels = {1, 2, 4, 8, 16};
  std::string max_running;
  std::string json_path;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "-h" || a == "--help") {
      fmt::print("usage: {} [seconds-per-level (20)] [levels (1,2,4,8,16)] [max_running_jobs] [--json FILE]\n", argv[0]);
      return 0;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() > 0) seconds = std::atof(positional[0].c_str());
  if (positional.size() > 1) levels = parse_levels(positional[1]);
  if (positional.size() > 2) max_running = positional[2];
  if (seconds <= 0 || levels.empty()) {
    fmt::print(stderr, "bench: bad arguments (try --help)\n");
    return 2;
  }
  if (geteuid() != 0) {
    fmt::print(stderr, "bench: run as root (the runner creates cgroups and switches accounts)\n");
    return 1;
  }
  const std::string extra = max_running.empty() ? "" : "max_running_jobs = " + max_running + "\n";
  RunnerProcess runner(extra);
  if (!runner.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", runner.log());
    return 1;
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  fmt::print("capacity: {} s per level, levels {}, {} online CPUs, max_running_jobs {}, load average at start {}\n",
             seconds, fmt::join(levels, ","), cores, max_running.empty() ? "default" : max_running, loadavg());
  fmt::print("job mix per client, in turn: ");
  for (size_t k = 0; k < kKindCount; ++k) fmt::print("{}{}", k ? ", " : "", kKinds[k].name);
  fmt::print("\n");

  // Warm up (page cache, first cgroups, the workspace): each kind once, not measured.
  int next_id = 1;
  {
    simdjson::dom::parser parser;
    for (size_t k = 0; k < kKindCount; ++k) {
      const JobResult r = run_job(runner.socket(), k, next_id++, fmt::format("warm-{}", k), Clock::now() + std::chrono::hours(1),
                                  parser);
      if (!r.completed) {
        fmt::print(stderr, "bench: warm-up job \"{}\" did not complete (refusal: {}, outcome: {})\n{}\n", kKinds[k].name,
                   r.refusal, r.outcome, runner.log());
        return 1;
      }
      if (r.outcome != "exit") fmt::print(stderr, "bench: warm-up job \"{}\" ended with {}\n", kKinds[k].name, r.outcome);
    }
  }

  std::vector<Level> results;
  for (int clients : levels) {
    fmt::print(stderr, "  level {} clients...\n", clients);
    results.push_back(run_level(runner, clients, seconds, next_id));
  }
  runner.stop();

  const Level& base = results.front();
  const double base_start = percentile(base.start_ms, 0.5);
  const double base_wall = percentile(base.wall_ms, 0.5);
  const double base_thr = base.jobs_per_min();
  const size_t cpu_kind = 1;
  const double base_cpu_wall = percentile(base.wall_ms_by_kind[cpu_kind], 0.5);

  fmt::print("\nthroughput and latency (x = ratio to the {}-client level of this run):\n", base.clients);
  fmt::print("{:>7} {:>6} {:>9} {:>6} | {:>9} {:>9} {:>6} {:>6} | {:>9} {:>9} {:>6} {:>7} | {:>8}\n", "clients", "done",
             "jobs/min", "x", "start p50", "start p90", "x p50", "x p90", "wall p50", "wall p90", "x p50", "x cpu", "qwait90");
  for (const Level& l : results) {
    const double s50 = percentile(l.start_ms, 0.5), s90 = percentile(l.start_ms, 0.9);
    const double w50 = percentile(l.wall_ms, 0.5), w90 = percentile(l.wall_ms, 0.9);
    fmt::print("{:>7} {:>6} {:>9.1f} {:>6} | {:>7.1f}ms {:>7.1f}ms {:>6} {:>6} | {:>7.0f}ms {:>7.0f}ms {:>6} {:>7} | {:>6.0f}ms\n",
               l.clients, l.completed, l.jobs_per_min(), ratio(l.jobs_per_min(), base_thr), s50, s90, ratio(s50, base_start),
               ratio(s90, base_start), w50, w90, ratio(w50, base_wall),
               ratio(percentile(l.wall_ms_by_kind[cpu_kind], 0.5), base_cpu_wall), percentile(l.queue_wait_ms, 0.9));
  }
  fmt::print("\nthe runner's cost and refusals:\n");
  fmt::print("{:>7} | {:>10} {:>12} | {:>12} {:>9} | {:>8} | {:>10} | {}\n", "clients", "loop stall", "stall/start50",
             "runner CPU %", "CPU/job x", "RSS MiB", "load 1 min", "refusals by reason; outcomes");
  const double base_cpu_per_job = base.completed > 0 ? base.runner_cpu_s / base.completed : 0;
  for (const Level& l : results) {
    std::string refusals;
    for (const auto& [reason, count] : l.refusals) refusals += fmt::format("{}{}={}", refusals.empty() ? "" : " ", reason, count);
    if (refusals.empty()) refusals = "none";
    std::string outcomes;
    for (const auto& [o, count] : l.outcomes) outcomes += fmt::format(" {}={}", o, count);
    const double cpu_per_job = l.completed > 0 ? l.runner_cpu_s / l.completed : 0;
    fmt::print("{:>7} | {:>8.1f}ms {:>12} | {:>12.1f} {:>9} | {:>8.1f} | {:>10} | {};{}\n", l.clients, l.stall_us / 1000.0,
               ratio(l.stall_us / 1000.0, base_start), 100.0 * l.runner_cpu_s / l.seconds, ratio(cpu_per_job, base_cpu_per_job),
               l.runner_rss_mib, l.load.substr(0, l.load.find(' ')), refusals, outcomes);
  }

  // Verdict: the highest level up to which every level kept its median start latency within 2x
  // of the single-client baseline and refused nothing.
  int sustainable = 0;
  for (const Level& l : results) {
    if (percentile(l.start_ms, 0.5) > 2 * base_start || l.refused() > 0 || l.completed == 0) break;
    sustainable = l.clients;
  }
  // Throughput saturation: the first level that adds less than 10% over the one before.
  int saturated = 0;
  for (size_t i = 1; i < results.size(); ++i) {
    if (results[i].jobs_per_min() < 1.1 * results[i - 1].jobs_per_min()) {
      saturated = results[i - 1].clients;
      break;
    }
  }
  double best_thr = 0;
  for (const Level& l : results) best_thr = std::max(best_thr, l.jobs_per_min());
  fmt::print("\nload average at end {}\n", loadavg());
  if (sustainable > 0) {
    fmt::print("sustainable concurrency on this host: {} (median start latency within 2x of the single-job baseline, no refusals)\n",
               sustainable);
  } else {
    fmt::print("sustainable concurrency on this host: none of the measured levels (even the baseline refused or completed nothing)\n");
  }
  if (saturated > 0) {
    fmt::print("throughput saturates at {} clients, {:.1f} per online CPU (the next level adds < 10%); peak {:.2f}x the single-client rate\n",
               saturated, saturated / static_cast<double>(cores), best_thr / base_thr);
  } else {
    fmt::print("throughput did not saturate within the measured levels; peak {:.2f}x the single-client rate\n", best_thr / base_thr);
  }

  if (!json_path.empty()) {
    std::string j = fmt::format(R"({{"seconds_per_level":{},"online_cpus":{},"max_running_jobs":"{}","sustainable_concurrency":{},"saturated_at":{},"levels":[)",
                                seconds, cores, max_running.empty() ? "default" : max_running, sustainable, saturated);
    for (size_t i = 0; i < results.size(); ++i) {
      const Level& l = results[i];
      std::string refusals;
      for (const auto& [reason, count] : l.refusals) refusals += fmt::format("{}\"{}\":{}", refusals.empty() ? "" : ",", reason, count);
      j += fmt::format(
          R"({}{{"clients":{},"completed":{},"jobs_per_min":{:.2f},"start_ms_p50":{:.2f},"start_ms_p90":{:.2f},"wall_ms_p50":{:.1f},"wall_ms_p90":{:.1f},"queue_wait_ms_p90":{:.1f},"loop_worst_stall_us":{:.0f},"runner_cpu_s":{:.3f},"runner_rss_mib":{:.1f},"loadavg":"{}","refusals":{{{}}}}})",
          i ? "," : "", l.clients, l.completed, l.jobs_per_min(), percentile(l.start_ms, 0.5), percentile(l.start_ms, 0.9),
          percentile(l.wall_ms, 0.5), percentile(l.wall_ms, 0.9), percentile(l.queue_wait_ms, 0.9), l.stall_us, l.runner_cpu_s,
          l.runner_rss_mib, l.load, refusals);
    }
    j += "]}\n";
    std::ofstream(json_path) << j;
    fmt::print("json: {}\n", json_path);
  }
  return 0;
}
