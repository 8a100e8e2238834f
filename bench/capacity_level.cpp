// One level of the capacity bench: the client threads, the samplers beside them, and the tally.
#include "capacity_level.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>

#include <simdjson.h>

#include "capacity_host.hpp"
#include "support/runner_harness.hpp"

namespace motor::bench::capacity {

using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

namespace {

// The runner logs "<what> stalled the loop for <N> ms" (reactor::SlowCall) for calls on its loop
// that took 5 ms or more; collect them by <what>.
void collect_slow_calls(std::string_view log, std::map<std::string, std::vector<double>>& out) {
  constexpr std::string_view kMarker = " stalled the loop for ";
  size_t pos = 0;
  while ((pos = log.find(kMarker, pos)) != std::string_view::npos) {
    const size_t line_start = log.rfind('\n', pos);
    std::string_view head = log.substr(line_start == std::string_view::npos ? 0 : line_start + 1,
                                       pos - (line_start == std::string_view::npos ? 0 : line_start + 1));
    // "<time> motor-runner warning: <what>"
    if (const size_t colon = head.find(": "); colon != std::string_view::npos) head = head.substr(colon + 2);
    const double millis = std::atof(std::string(log.substr(pos + kMarker.size(), 32)).c_str());
    out[std::string(head)].push_back(millis);
    pos += kMarker.size();
  }
}

double runner_stall_us(const std::string& socket, bool reset) {
  RawClient s(socket);
  if (!s.send_frame(reset ? R"({"id":1,"method":"runner.status","params":{"reset_stall":true}})"
                          : R"({"id":1,"method":"runner.status","params":{}})")) {
    return NAN;
  }
  auto reply = s.read_frame();
  return reply ? std::atof(json_field(*reply, "/result/loop_worst_stall_us").c_str()) : NAN;
}

// Sampler: running jobs every 20 ms, the runner's RSS every 100 ms, over the whole level.
struct LoadSampler {
  double running_sum = 0, rss_sum = 0, rss_peak = 0;
  int running_n = 0, rss_n = 0;
  std::thread thread;

  void start(const std::atomic<int>& running, pid_t runner_pid, const std::atomic<bool>& done) {
    thread = std::thread([this, &running, runner_pid, &done] {
      for (int tick = 0; !done; ++tick) {
        running_sum += running.load();
        ++running_n;
        if (runner_pid > 0 && tick % 5 == 0) {
          const double rss = process_rss_mib(runner_pid);
          if (std::isfinite(rss)) {
            rss_sum += rss;
            rss_peak = std::max(rss_peak, rss);
            ++rss_n;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
};

// The runner's view of itself, sampled over the level.
struct StatusSampler {
  double st_running = 0, st_queue = 0, st_queue_max = 0, st_claimed = 0;
  int st_n = 0;
  std::thread thread;

  void start(const RunnerProcess& runner, const std::atomic<bool>& done) {
    thread = std::thread([this, &runner, &done] {
      simdjson::dom::parser parser;
      while (!done) {
        RawClient sc(runner.socket());
        if (sc.send_frame(R"({"id":1,"method":"runner.status","params":{}})")) {
          if (auto reply = sc.read_frame(std::chrono::milliseconds(5000))) add(parser, *reply);
        }
        for (int i = 0; i < 25 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  void add(simdjson::dom::parser& parser, const std::string& reply) {
    simdjson::dom::element root;
    simdjson::dom::array jobs;
    uint64_t depth = 0;
    double claimed = 0;
    if (!parser.parse(reply).get(root) && !root.at_pointer("/result/running_jobs").get_array().get(jobs) &&
        !root.at_pointer("/result/queue_depth").get_uint64().get(depth) &&
        !root.at_pointer("/result/cpus_claimed").get_double().get(claimed)) {
      st_running += static_cast<double>(jobs.size());
      st_queue += static_cast<double>(depth);
      st_queue_max = std::max(st_queue_max, static_cast<double>(depth));
      st_claimed += claimed;
      ++st_n;
    }
  }
  void store(Level& level) const {
    if (st_n > 0) {
      level.status_running = st_running / st_n;
      level.status_queue = st_queue / st_n;
      level.status_queue_max = st_queue_max;
      level.status_cpus_claimed = st_claimed / st_n;
    }
  }
};

// `clients` threads, each from its own offset in the mix, one job after another until the deadline.
std::vector<JobResult> run_clients(int clients, Clock::time_point t0, Clock::time_point deadline, const RunOne& run_one,
                                   std::atomic<int>& running) {
  std::mutex mu;
  std::vector<JobResult> results;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      size_t kind = static_cast<size_t>(c) % kKindCount;
      while (Clock::now() < deadline) {
        const double begin = std::chrono::duration<double>(Clock::now() - t0).count();
        JobResult r = run_one(kind, deadline, running);
        r.begin_s = begin;
        r.end_s = std::chrono::duration<double>(Clock::now() - t0).count();
        const bool failed = !r.ok;
        {
          std::lock_guard lock(mu);
          results.push_back(std::move(r));
        }
        kind = (kind + 1) % kKindCount;
        if (failed) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // back off
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void tally(Level& level, const std::vector<JobResult>& results) {
  for (const JobResult& r : results) {
    ++level.finished;
    if (!r.ok) {
      ++level.failures[r.failure.empty() ? "unknown" : r.failure];
      continue;
    }
    if (r.in_window) ++level.completed;
    if (r.end_s > r.begin_s) {
      level.work_in_window += std::max(0.0, std::min(r.end_s, level.seconds) - r.begin_s) / (r.end_s - r.begin_s);
    }
    if (std::isfinite(r.start_ms)) level.start_ms.push_back(r.start_ms);
    if (std::isfinite(r.first_ms)) level.first_ms.push_back(r.first_ms);
    if (std::isfinite(r.queue_wait_ms)) level.queue_wait_ms.push_back(r.queue_wait_ms);
    if (std::isfinite(r.wall_ms)) {
      level.wall_ms.push_back(r.wall_ms);
      level.wall_ms_by_kind[r.kind].push_back(r.wall_ms);
    }
  }
}

}  // namespace

Level run_level(const std::string& system, int clients, double seconds, const RunOne& run_one,
                const RunnerProcess* runner) {
  Level level;
  level.system = system;
  level.clients = clients;
  level.seconds = seconds;
  const pid_t runner_pid = runner ? runner->pid() : -1;
  size_t log_offset = 0;
  if (runner) {
    runner_stall_us(runner->socket(), true);
    level.runner_rss_before = process_rss_mib(runner_pid);
    log_offset = runner->log().size();
  }
  const double runner_cpu0 = runner_pid > 0 ? process_cpu_seconds(runner_pid) : 0;
  const auto sched0 = runner_pid > 0 ? sched_run_wait_seconds(runner_pid) : std::pair<double, double>{};
  const double host0 = host_busy_seconds();
  std::atomic<int> running{0};
  std::atomic<bool> done{false};
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));

  LoadSampler load;
  load.start(running, runner_pid, done);
  StatusSampler status;
  if (runner) status.start(*runner, done);
  const std::vector<JobResult> results = run_clients(clients, t0, deadline, run_one, running);
  done = true;
  load.thread.join();
  if (status.thread.joinable()) status.thread.join();
  status.store(level);
  level.elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  level.host_cpu_s = host_busy_seconds() - host0;
  level.avg_running = load.running_n ? load.running_sum / load.running_n : 0;
  if (runner_pid > 0) {
    level.runner_cpu_s = process_cpu_seconds(runner_pid) - runner_cpu0;
    level.runner_runq_wait_pct = 100.0 * (sched_run_wait_seconds(runner_pid).second - sched0.second) / level.elapsed;
    level.runner_rss_mean = load.rss_n ? load.rss_sum / load.rss_n : NAN;
    level.runner_rss_peak = load.rss_n ? load.rss_peak : NAN;
    level.stall_us = runner_stall_us(runner->socket(), false);
    const std::string log = runner->log();
    if (log.size() > log_offset) collect_slow_calls(std::string_view(log).substr(log_offset), level.slow_calls);
  }
  level.load1_after = load1();
  tally(level, results);
  return level;
}

int saturation_level(const std::vector<const Level*>& ls) {
  for (size_t i = 1; i < ls.size(); ++i) {
    if (ls[i]->jobs_per_s() < 1.1 * ls[i - 1]->jobs_per_s()) return ls[i - 1]->clients;
  }
  return 0;  // not within the measured levels
}

int latency_bounded_level(const std::vector<const Level*>& ls) {
  if (ls.empty()) return 0;
  const double base = percentile(ls.front()->own_start(), 0.5);
  int ok = 0;
  for (const Level* l : ls) {
    if (l->failed() > 0 || l->work_in_window <= 0 || !std::isfinite(base)) break;
    if (percentile(l->own_start(), 0.5) > 2 * base || percentile(l->own_start(), 0.99) > 4 * base) break;
    ok = l->clients;
  }
  return ok;
}

}  // namespace motor::bench::capacity
