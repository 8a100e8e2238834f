// The capacity report (issue 6, docs/capacity.md). One run drives, at rising concurrency N:
//
//   motor   a real motor-runner (the test harness's RunnerProcess), N client threads each
//           submitting one `exec.run` after another on a fresh connection, as `motor run` would;
//   bwrap   the same commands under `bwrap --unshare-all ... sh -c CMD`, N at a time, launched
//           by this program; the memory-capped kind runs in a memory cgroup this program makes;
//   podman  the same commands under `podman run --runtime runc ... --rootfs DIR sh -c CMD`
//           (DIR: an empty skeleton with the host's /usr bound read-only; no image, no registry),
//           where podman starts; otherwise the report says "podman: skipped: <reason>".
//
// Each level runs motor, bwrap and podman back to back, so load elsewhere on the host hits all
// three alike. Every figure is reported with its ratio to the single-client level of the same
// system and to the peers at the same level; the rule of thumb is derived from the ratios.
//
//   motor_bench_capacity [seconds-per-level (8)] [--levels 1,2,4,8,16] [--out DIR]
//                        [--runner-config TEXT] [--peers bwrap,podman | --peers none]
//
// Writes DIR/capacity.json (every figure), DIR/capacity.dat + DIR/capacity.gp and, when gnuplot
// is installed (bench/setup), DIR/capacity.svg. Run as root.
//
// This file: the command line, the systems, the warm-up and the levels in turn. The job mix is in
// capacity_job.hpp, host facts from /proc in capacity_host, how motor and the peers run one job
// in capacity_peers, one level in capacity_level, the tables and files in capacity_report.
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "capacity_host.hpp"
#include "capacity_job.hpp"
#include "capacity_level.hpp"
#include "capacity_peers.hpp"
#include "capacity_report.hpp"
#include "support/runner_harness.hpp"

namespace {

using namespace motor::bench::capacity;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

std::vector<int> parse_levels(const std::string& s) {
  std::vector<int> out;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    const int n = std::atoi(part.c_str());
    if (n > 0) out.push_back(n);
  }
  return out;
}

struct Options {
  double seconds = 8;
  std::vector<int> levels = {1, 2, 4, 8, 16};
  std::string out_dir = "capacity-report";
  std::string runner_config = "cpu_oversubscription = 8\ndefault_memory = 1G\n";
  bool want_bwrap = true, want_podman = true;
};

// The command line into *o; an exit code where the program ends here (--help, bad arguments).
std::optional<int> parse_args(int argc, char** argv, Options* o) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--levels") {
      o->levels = parse_levels(value());
    } else if (a == "--out") {
      o->out_dir = value();
    } else if (a == "--runner-config") {
      o->runner_config = value();
      if (!o->runner_config.empty() && o->runner_config.back() != '\n') o->runner_config += '\n';
    } else if (a == "--job-nice") {
      const int n = std::atoi(value().c_str());
      if (n > 0) g_job_prefix = fmt::format("renice -n {} -p $$ >/dev/null; ", n);
    } else if (a == "--peers") {
      const std::string p = value();
      o->want_bwrap = p.find("bwrap") != std::string::npos;
      o->want_podman = p.find("podman") != std::string::npos;
    } else if (a == "-h" || a == "--help") {
      fmt::print(
          "usage: {} [seconds-per-level (8)] [--levels 1,2,4,8,16] [--out DIR (capacity-report)]\n"
          "          [--runner-config TEXT (\"cpu_oversubscription = 8\\ndefault_memory = 1G\")] [--peers bwrap,podman|none]\n"
          "          [--job-nice N (experiment: every job renices itself by N first)]\n",
          argv[0]);
      return 0;
    } else {
      positional.push_back(a);
    }
  }
  if (!positional.empty()) o->seconds = std::atof(positional[0].c_str());
  if (positional.size() > 1) o->levels = parse_levels(positional[1]);
  if (o->seconds <= 0 || o->levels.empty() || o->out_dir.empty()) {
    fmt::print(stderr, "capacity: bad arguments (try --help)\n");
    return 2;
  }
  return std::nullopt;
}

// What it measures on (the cgroup layout comes from the runner, later).
HostFacts host_facts() {
  HostFacts h;
  utsname u{};
  uname(&u);
  h.online = sysconf(_SC_NPROCESSORS_ONLN);
  h.usable_cpus = affinity_cpus();
  h.mem_total_kib = meminfo_kib("MemTotal");
  h.mem_avail_kib = meminfo_kib("MemAvailable");
  h.load_before = loadavg();
  h.kernel = fmt::format("{} {}", u.sysname, u.release);
  h.model = cpu_model();
  return h;
}

void print_header(const Options& o, const HostFacts& h, const std::string& runner_version) {
  fmt::print("capacity report: {} s per level, levels {}\n", o.seconds, fmt::join(o.levels, ","));
  fmt::print("host: {} online CPUs ({} usable), {}; {:.1f} GiB RAM ({:.1f} GiB available); {}; cgroups: {}\n", h.online,
             h.usable_cpus, h.model, static_cast<double>(h.mem_total_kib) / 1048576.0,
             static_cast<double>(h.mem_avail_kib) / 1048576.0, h.kernel, h.cgroup_layout);
  fmt::print("load average before: {} (1, 5, 15 min)\n", h.load_before);
  std::string cfg_line = o.runner_config;
  std::replace(cfg_line.begin(), cfg_line.end(), '\n', ';');
  fmt::print("runner: motor-runner {} with config: {} (plus the harness's cgroup_parent and job_log_max_size = 64M)\n",
             runner_version, cfg_line);
  if (!g_job_prefix.empty()) fmt::print("EXPERIMENT: every job first runs `{}`\n", g_job_prefix);
  fmt::print("job mix, each client in turn from its own offset:");
  for (const JobKind& k : kKinds) fmt::print(" {}{}", k.name, k.memory ? fmt::format(" (memory {})", k.memory) : "");
  fmt::print("\n");
}

// bwrap as a peer where it is installed and starts here; what became of it, for the report.
std::string add_bwrap(std::vector<System>& systems, PeerCgroups& peer_cgroups) {
  std::string why;
  if (access("/usr/bin/bwrap", X_OK) != 0) {
    return "skipped: /usr/bin/bwrap not installed (scripts/setup installs bubblewrap)";
  }
  if (!run_ok(bwrap_argv("echo ok"), &why)) return "skipped: it does not start here: " + why;
  systems.push_back({"bwrap",
                     [&](size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
                       return bwrap_job(peer_cgroups, kind, deadline, running);
                     },
                     nullptr, "spawn -> first output byte"});
  return peer_cgroups.usable() ? "ran; memcap jobs in a " + peer_cgroups.layout() + " cgroup the bench makes per job"
                               : "ran; memcap jobs UNCAPPED: " + peer_cgroups.why_not();
}

// podman as a peer where it is installed and starts here; what became of it, for the report.
std::string add_podman(std::vector<System>& systems, const PodmanRoot& podman_root) {
  std::string why;
  if (access("/usr/bin/podman", X_OK) != 0) return "skipped: /usr/bin/podman not installed (bench/setup installs it)";
  if (podman_root.dir().empty()) return "skipped: could not make a temporary rootfs";
  if (!run_ok(podman_argv(podman_root.dir(), 0), &why)) return "skipped: it does not start here: " + why;
  systems.push_back({"podman",
                     [&](size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
                       return spawn_job(Spawn{podman_argv(podman_root.dir(), kind), -1}, kind, deadline, running);
                     },
                     nullptr, "spawn -> first output byte"});
  return "ran: --runtime runc, --rootfs of the host's /usr (no image, no registry); memcap jobs --memory 256m";
}

// Warm-up, not measured: each kind once through each system (page cache, first cgroups).
// False where a motor job failed (a peer's failure is printed and the run goes on).
bool warm_up(const std::vector<System>& systems, const RunnerProcess& runner) {
  for (const System& s : systems) {
    std::atomic<int> running{0};
    for (size_t k = 0; k < kKindCount; ++k) {
      const JobResult r = s.run(k, Clock::now() + std::chrono::hours(1), running);
      if (!r.ok) {
        fmt::print(stderr, "capacity: warm-up job \"{}\" through {} failed: {}\n", kKinds[k].name, s.name, r.failure);
        if (s.name == "motor") {
          fmt::print(stderr, "{}\n", runner.log());
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const auto exit_code = parse_args(argc, argv, &o)) return *exit_code;
  if (geteuid() != 0) {
    fmt::print(stderr, "capacity: run as root (the runner creates cgroups and switches accounts)\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  mkdir(o.out_dir.c_str(), 0755);
  HostFacts host = host_facts();

  RunnerProcess runner(o.runner_config);
  if (!runner.start()) {
    fmt::print(stderr, "capacity: the runner did not start:\n{}\n", runner.log());
    return 1;
  }
  const std::string status = runner_status(runner);
  host.cgroup_layout = json_field(status, "/result/cgroup_layout");
  const std::string runner_version = json_field(status, "/result/version");
  print_header(o, host, runner_version);

  // --- the systems ---
  std::atomic<int> next_id{1};
  std::vector<System> systems;
  systems.push_back({"motor",
                     [&](size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
                       return motor_job(runner.socket(), kind, next_id++, deadline, running);
                     },
                     &runner, "request -> `started` record (start); -> first output record (first byte)"});

  PeerCgroups peer_cgroups;
  const std::string bwrap_status = o.want_bwrap ? add_bwrap(systems, peer_cgroups) : "skipped: not asked for (--peers)";
  PodmanRoot podman_root;
  const std::string podman_status = o.want_podman ? add_podman(systems, podman_root) : "skipped: not asked for (--peers)";
  fmt::print("bwrap: {}\npodman: {}\n", bwrap_status, podman_status);
  if (!warm_up(systems, runner)) return 1;
  const double runner_rss_idle = process_rss_mib(runner.pid());

  // --- the levels: at each, every system in turn ---
  std::vector<Level> results;
  for (int clients : o.levels) {
    for (const System& s : systems) {
      fmt::print(stderr, "  level {:>2} clients: {}...\n", clients, s.name);
      results.push_back(run_level(s.name, clients, o.seconds, s.run, s.runner));
    }
  }
  const double runner_rss_end = process_rss_mib(runner.pid());
  host.load_after = loadavg();
  runner.stop();
  motor::test::write_file(o.out_dir + "/runner.log", runner.log());

  const Report report{systems, o.levels, o.seconds, results, host,
                      RunnerFacts{runner_version, o.runner_config, runner_rss_idle, runner_rss_end},
                      bwrap_status, podman_status, o.out_dir};
  print_and_write_report(report);
  return 0;
}
