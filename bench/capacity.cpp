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
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "stats.hpp"
#include "support/runner_harness.hpp"

extern char** environ;

namespace {

using motor::bench::percentile;

using Clock = std::chrono::steady_clock;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::read_file;
using motor::test::RunnerProcess;

// ---------------------------------------------------------------------------------------------
// The standard job mix. Every command first prints one line, so that "the command has begun"
// is seen the same way through all three systems (the first output byte); motor also reports
// its own `started` record, which is the start latency issue 6 asks for.
struct JobKind {
  const char* name;
  const char* command;
  const char* memory;  // a cap, or nullptr for the runner's default
  const char* stands_for;
};
constexpr JobKind kKinds[] = {
    {"short", "echo go; echo ok", nullptr, "a quick check (git status, ls)"},
    {"cpu", "echo go; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo $i", nullptr,
     "a compile step: one core busy for a while"},
    {"output", "echo go; seq 1 100000", nullptr, "a chatty test run (about 590 KB of output)"},
    {"memcap", "echo go; x=$(head -c 16000000 /dev/zero | tr '\\000' a); echo ${#x}", "256M",
     "a job with its own memory cap (16 MB held under a 256 MiB cap)"},
};
constexpr size_t kKindCount = std::size(kKinds);

// --job-nice N (an experiment, off by default): every job first lowers its own CPU priority, in
// every system alike, to see how much of the runner's start latency is CPU contention with its
// own jobs (jobs run at the runner's priority and, on cgroup v1, outside any cpu controller).
std::string g_job_prefix;
std::string job_command(size_t kind) { return g_job_prefix + kKinds[kind].command; }
constexpr int64_t kMemcapBytes = 256LL << 20;

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  return out;
}


std::string num(double v, int decimals = 2) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : "null";
}
std::string ratio(double value, double base) {
  return (std::isfinite(value) && std::isfinite(base) && base > 0) ? fmt::format("{:.2f}", value / base) : "-";
}
std::string ms(double v) { return std::isfinite(v) ? fmt::format("{:.1f}", v) : "-"; }

// ---------------------------------------------------------------------------------------------
// Host facts.
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
std::string loadavg() {
  std::istringstream in(read_file("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}
double load1() { return std::atof(read_file("/proc/loadavg").c_str()); }
int64_t meminfo_kib(const char* key) {
  std::istringstream in(read_file("/proc/meminfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0 && line.size() > std::strlen(key) && line[std::strlen(key)] == ':') {
      return std::atoll(line.c_str() + std::strlen(key) + 1);
    }
  }
  return -1;
}
std::string cpu_model() {
  std::istringstream in(read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? "" : trim(line.substr(colon + 2));
    }
  }
  return "unknown";
}
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}
// Busy (non-idle, non-iowait) CPU time of the whole host, in core-seconds.
double host_busy_seconds() {
  std::istringstream in(read_file("/proc/stat"));
  std::string cpu;
  in >> cpu;
  double v[10] = {};
  for (double& x : v) in >> x;
  const double busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}
// One process's own CPU time (utime + stime, not its children's), in seconds.
double process_cpu_seconds(pid_t pid) {
  const std::string text = read_file(fmt::format("/proc/{}/stat", pid));
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
// The loop thread's (the process's main thread) time on a CPU and time runnable but waiting for
// one, in seconds (/proc/<pid>/schedstat: run ns, run-queue wait ns, timeslices).
std::pair<double, double> sched_run_wait_seconds(pid_t pid) {
  std::istringstream in(read_file(fmt::format("/proc/{}/schedstat", pid)));
  double run = 0, wait = 0;
  in >> run >> wait;
  return {run / 1e9, wait / 1e9};
}
double process_rss_mib(pid_t pid) {
  const std::string text = read_file(fmt::format("/proc/{}/status", pid));
  const size_t at = text.find("\nVmRSS:");
  return at == std::string::npos ? std::nan("") : std::atof(text.c_str() + at + 7) / 1024.0;
}

// ---------------------------------------------------------------------------------------------
// One job's result, whichever system ran it.
struct JobResult {
  size_t kind = 0;
  bool ok = false;            // exit code 0
  bool in_window = false;     // finished before the level's deadline
  std::string failure;        // refusal reason, nonzero exit, lost connection...
  double start_ms = NAN;      // motor only: request sent -> `started` record
  double first_ms = NAN;      // request / spawn -> the first output byte (all systems)
  double wall_ms = NAN;       // request / spawn -> terminal record / exit
  double queue_wait_ms = NAN; // motor only: `started.queue_wait_ms`
  double begin_s = 0, end_s = 0;  // submitted / ended, seconds from the level's start
};

// What a system needs to run one job of the mix. `running` counts jobs between their start
// (motor: `started`; peers: first output byte) and their end, for "per running job" figures.
using RunOne = std::function<JobResult(size_t kind, Clock::time_point deadline, std::atomic<int>& running)>;

// --- motor ---------------------------------------------------------------------------------
std::string motor_request(size_t kind, int id) {
  const JobKind& k = kKinds[kind];
  std::string memory = k.memory ? fmt::format(R"(,"memory":"{}")", k.memory) : "";
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"{}","timeout":600{}}}}})", id,
                     json_escape(job_command(kind)), memory);
}

JobResult motor_job(const std::string& socket, size_t kind, int id, Clock::time_point deadline,
                    std::atomic<int>& running) {
  JobResult r;
  r.kind = kind;
  simdjson::dom::parser parser;
  RawClient c(socket);
  if (!c.connected()) {
    r.failure = "connect_failed";
    return r;
  }
  const auto t0 = Clock::now();
  auto ms_since = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  if (!c.send_frame(motor_request(kind, id))) {
    r.failure = "send_failed";
    return r;
  }
  bool counted = false;
  auto uncount = [&] {
    if (counted) --running;
    counted = false;
  };
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(600000));
    if (!f) {
      uncount();
      r.failure = "connection_lost";
      return r;
    }
    simdjson::dom::element root;
    if (parser.parse(*f).get(root)) {
      uncount();
      r.failure = "invalid_record";
      return r;
    }
    std::string_view type;
    if (root["type"].get_string().get(type)) {
      std::string_view code;
      if (!root.at_pointer("/error/code").get_string().get(code)) {
        uncount();
        r.failure = std::string(code);
        return r;
      }
      continue;  // a reply without a type and without an error: skip
    }
    if (type == "started") {
      r.start_ms = ms_since();
      int64_t wait = 0;
      if (!root["queue_wait_ms"].get_int64().get(wait)) r.queue_wait_ms = static_cast<double>(wait);
      ++running;
      counted = true;
    } else if (type == "output") {
      if (std::isnan(r.first_ms)) r.first_ms = ms_since();
    } else if (type == "terminal") {
      r.wall_ms = ms_since();
      r.in_window = Clock::now() <= deadline;
      uncount();
      std::string_view outcome;
      if (root.at_pointer("/outcome/type").get_string().get(outcome)) outcome = "unknown";
      int64_t code = -1;
      if (outcome == "exit" && !root.at_pointer("/outcome/code").get_int64().get(code) && code == 0) {
        r.ok = true;
      } else if (outcome == "refused_before_start") {
        std::string_view reason;
        if (root.at_pointer("/outcome/reason").get_string().get(reason)) reason = "unknown";
        r.failure = std::string(reason);
      } else {
        r.failure = outcome == "exit" ? fmt::format("exit_{}", code) : std::string(outcome);
      }
      return r;
    }
  }
}

// --- peers: a process whose stdout+stderr is one pipe -------------------------------------
struct Spawn {
  std::vector<std::string> argv;
  int cgroup_procs_fd = -1;  // if set, the child moves itself into that cgroup before exec
};

JobResult spawn_job(const Spawn& s, size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
  JobResult r;
  r.kind = kind;
  std::vector<char*> args;
  for (const auto& a : s.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) {
    r.failure = "pipe_failed";
    return r;
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto t0 = Clock::now();
  // fork in a threaded program: the child only makes async-signal-safe calls before exec.
  const pid_t pid = fork();
  if (pid == 0) {
    if (s.cgroup_procs_fd >= 0 && write(s.cgroup_procs_fd, "0", 1) != 1) _exit(126);
    dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), environ);
    _exit(127);
  }
  close(fds[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(fds[0]);
    r.failure = "fork_failed";
    return r;
  }
  auto ms_since = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  bool counted = false;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      if (!counted && std::isnan(r.first_ms)) {
        r.first_ms = ms_since();
        ++running;
        counted = true;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.wall_ms = ms_since();
  r.in_window = Clock::now() <= deadline;
  if (counted) --running;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.ok = true;
  } else {
    r.failure = WIFEXITED(status) ? fmt::format("exit_{}", WEXITSTATUS(status))
                                  : fmt::format("signal_{}", WTERMSIG(status));
  }
  return r;
}

bool is_symlink(const char* path) {
  struct stat st{};
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

// The bwrap line issue 6 names, with the merged-/usr links as on this host.
std::vector<std::string> bwrap_argv(const std::string& command) {
  std::vector<std::string> a{"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session",
                             "--cap-drop",     "ALL",           "--ro-bind",         "/usr",
                             "/usr"};
  for (const char* link : {"/bin", "/lib", "/lib64", "/sbin"}) {
    if (!is_symlink(link)) continue;
    char target[256];
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) a.insert(a.end(), {"--symlink", std::string(target, static_cast<size_t>(n)), link});
  }
  a.insert(a.end(), {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--chdir", "/tmp", "/bin/sh", "-c", command});
  return a;
}

// Memory cgroups for the bwrap peer's capped jobs: bwrap has no cap of its own, so the bench
// does what a wrapper around it would (one cgroup per job, the cap, the job in it, removal).
class PeerCgroups {
 public:
  PeerCgroups() {
    const std::string name = fmt::format("motor-bench-capacity-{}", getpid());
    if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0) {
      parent_ = "/sys/fs/cgroup/memory/" + name;
      v1_ = true;
    } else if (read_file("/sys/fs/cgroup/cgroup.controllers").find("memory") != std::string::npos) {
      parent_ = "/sys/fs/cgroup/" + name;
    } else {
      why_not_ = "no memory controller (cgroup v1 memory or cgroup2 memory) on this host";
      return;
    }
    if (mkdir(parent_.c_str(), 0755) < 0 && errno != EEXIST) {
      why_not_ = fmt::format("mkdir {}: {}", parent_, std::strerror(errno));
      parent_.clear();
      return;
    }
    if (!v1_) motor::test::write_file(parent_ + "/cgroup.subtree_control", "+memory");
  }
  ~PeerCgroups() {
    if (!parent_.empty()) rmdir(parent_.c_str());
  }
  bool usable() const { return !parent_.empty(); }
  const std::string& why_not() const { return why_not_; }
  std::string layout() const { return usable() ? (v1_ ? "cgroup v1 memory" : "cgroup2 memory") : "none"; }

  // A fresh capped cgroup: its path and an open fd on its procs file (or "" / -1).
  std::pair<std::string, int> make(int64_t bytes) {
    if (!usable()) return {"", -1};
    const std::string cg = fmt::format("{}/job-{}", parent_, next_++);
    if (mkdir(cg.c_str(), 0755) < 0) return {"", -1};
    if (v1_) {
      motor::test::write_file(cg + "/memory.limit_in_bytes", std::to_string(bytes));
      if (access((cg + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
        motor::test::write_file(cg + "/memory.memsw.limit_in_bytes", std::to_string(bytes));
      }
    } else {
      motor::test::write_file(cg + "/memory.max", std::to_string(bytes));
      motor::test::write_file(cg + "/memory.swap.max", "0");
    }
    return {cg, ::open((cg + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC)};
  }
  static void remove(const std::string& cg) {
    for (int i = 0; i < 200 && rmdir(cg.c_str()) < 0 && errno == EBUSY; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  std::string parent_, why_not_;
  bool v1_ = false;
  std::atomic<int> next_{0};
};

JobResult bwrap_job(PeerCgroups& cgroups, size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
  Spawn s{bwrap_argv(job_command(kind)), -1};
  std::string cg;
  if (kKinds[kind].memory) std::tie(cg, s.cgroup_procs_fd) = cgroups.make(kMemcapBytes);
  JobResult r = spawn_job(s, kind, deadline, running);
  if (s.cgroup_procs_fd >= 0) close(s.cgroup_procs_fd);
  if (!cg.empty()) PeerCgroups::remove(cg);
  return r;
}

// podman with no image: a skeleton root (merged-/usr links, /etc/passwd and /etc/group for
// root, mount points), the host's /usr bound read-only, `--rootfs`.
class PodmanRoot {
 public:
  PodmanRoot() {
    char tmpl[] = "/tmp/motor-bench-rootfs-XXXXXX";
    if (const char* d = mkdtemp(tmpl)) dir_ = d;
    if (dir_.empty()) return;
    chmod(dir_.c_str(), 0755);
    for (const char* sub : {"usr", "etc", "tmp", "proc", "dev", "sys", "run", "root"}) {
      mkdir((dir_ + "/" + sub).c_str(), 0755);
    }
    chmod((dir_ + "/tmp").c_str(), 01777);
    for (const char* link : {"bin", "lib", "lib64", "sbin"}) {
      const std::string host = std::string("/") + link;
      char target[256];
      const ssize_t n = readlink(host.c_str(), target, sizeof target - 1);
      if (n > 0) (void)!symlink(std::string(target, static_cast<size_t>(n)).c_str(), (dir_ + host).c_str());
    }
    motor::test::write_file(dir_ + "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
    motor::test::write_file(dir_ + "/etc/group", "root:x:0:\n");
  }
  ~PodmanRoot() { motor::test::remove_tree(dir_); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

std::vector<std::string> podman_argv(const std::string& rootfs, size_t kind) {
  std::vector<std::string> a{"/usr/bin/podman", "run",       "--rm",     "--runtime",         "runc",
                             "--ulimit",        "nofile=4096:4096",       "--ulimit",          "nproc=4096:4096",
                             "--network",       "none",      "--volume", "/usr:/usr:ro",      "--workdir",
                             "/tmp"};
  if (kKinds[kind].memory) a.insert(a.end(), {"--memory", "256m", "--memory-swap", "256m"});
  a.insert(a.end(), {"--rootfs", rootfs, "/bin/sh", "-c", job_command(kind)});
  return a;
}

// ---------------------------------------------------------------------------------------------
struct Level {
  std::string system;
  int clients = 0;
  double seconds = 0;   // the level's window
  double elapsed = 0;   // window + the drain of jobs in flight
  int completed = 0;    // ok and finished in the window
  double work_in_window = 0;  // sum over ok jobs of the share of each job's time inside the window
  int finished = 0;     // every job that ended (in or after the window)
  std::map<std::string, int> failures;
  std::vector<double> start_ms, first_ms, wall_ms, queue_wait_ms;
  std::vector<double> wall_ms_by_kind[kKindCount];
  double avg_running = 0;
  double host_cpu_s = 0;
  // motor only
  double runner_cpu_s = NAN, runner_rss_before = NAN, runner_rss_mean = NAN, runner_rss_peak = NAN, stall_us = NAN;
  std::map<std::string, std::vector<double>> slow_calls;  // what the runner logged as stalling its loop, ms
  // The runner's own view, from runner.status every 250 ms: jobs it counts as running, its queue
  // depth, and CPUs claimed (means; queue depth also its maximum).
  double status_running = NAN, status_queue = NAN, status_queue_max = NAN, status_cpus_claimed = NAN;
  // The loop thread's run-queue wait over the level, in % of the level's time: how long the
  // runner was ready to work but had no CPU (the scheduler, not the runner's own code).
  double runner_runq_wait_pct = NAN;
  double load1_after = 0;

  // Sustained throughput: jobs' worth of work done inside the window (a job that straddles the
  // window's end counts for the share of its time inside it), per second of window. Unlike
  // "finished inside the window", this does not drop to 0 when jobs take longer than the window.
  double jobs_per_s() const { return seconds > 0 ? work_in_window / seconds : 0; }
  int failed() const {
    int n = 0;
    for (const auto& [reason, count] : failures) n += count;
    return n;
  }
  // The start figure that compares across systems: the first output byte.
  double first_p50() const { return percentile(first_ms, 0.5); }
  // The start figure of the system itself: motor's `started`, the peers' first byte.
  const std::vector<double>& own_start() const { return system == "motor" ? start_ms : first_ms; }
  double host_busy_cores() const { return elapsed > 0 ? host_cpu_s / elapsed : 0; }
  // The runner's memory per running job: growth over its idle RSS just before the level (so
  // finished jobs kept from earlier levels do not count), per average running job.
  double runner_mib_per_running_job() const {
    return avg_running > 0 ? (runner_rss_mean - runner_rss_before) / avg_running : NAN;
  }
};

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
  std::mutex mu;
  std::vector<JobResult> results;
  std::atomic<int> running{0};
  std::atomic<bool> done{false};
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));

  // Sampler: running jobs every 20 ms, the runner's RSS every 100 ms, over the whole level.
  double running_sum = 0, rss_sum = 0, rss_peak = 0;
  int running_n = 0, rss_n = 0;
  std::thread sampler([&] {
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

  // The runner's view of itself, sampled over the level.
  double st_running = 0, st_queue = 0, st_queue_max = 0, st_claimed = 0;
  int st_n = 0;
  std::thread status_sampler;
  if (runner) {
    status_sampler = std::thread([&] {
      simdjson::dom::parser parser;
      while (!done) {
        RawClient sc(runner->socket());
        if (sc.send_frame(R"({"id":1,"method":"runner.status","params":{}})")) {
          if (auto reply = sc.read_frame(std::chrono::milliseconds(5000))) {
            simdjson::dom::element root;
            simdjson::dom::array jobs;
            uint64_t depth = 0;
            double claimed = 0;
            if (!parser.parse(*reply).get(root) && !root.at_pointer("/result/running_jobs").get_array().get(jobs) &&
                !root.at_pointer("/result/queue_depth").get_uint64().get(depth) &&
                !root.at_pointer("/result/cpus_claimed").get_double().get(claimed)) {
              st_running += static_cast<double>(jobs.size());
              st_queue += static_cast<double>(depth);
              st_queue_max = std::max(st_queue_max, static_cast<double>(depth));
              st_claimed += claimed;
              ++st_n;
            }
          }
        }
        for (int i = 0; i < 25 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }

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
  done = true;
  sampler.join();
  if (status_sampler.joinable()) status_sampler.join();
  if (st_n > 0) {
    level.status_running = st_running / st_n;
    level.status_queue = st_queue / st_n;
    level.status_queue_max = st_queue_max;
    level.status_cpus_claimed = st_claimed / st_n;
  }
  level.elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  level.host_cpu_s = host_busy_seconds() - host0;
  level.avg_running = running_n ? running_sum / running_n : 0;
  if (runner_pid > 0) {
    level.runner_cpu_s = process_cpu_seconds(runner_pid) - runner_cpu0;
    level.runner_runq_wait_pct = 100.0 * (sched_run_wait_seconds(runner_pid).second - sched0.second) / level.elapsed;
    level.runner_rss_mean = rss_n ? rss_sum / rss_n : NAN;
    level.runner_rss_peak = rss_n ? rss_peak : NAN;
    level.stall_us = runner_stall_us(runner->socket(), false);
    const std::string log = runner->log();
    if (log.size() > log_offset) collect_slow_calls(std::string_view(log).substr(log_offset), level.slow_calls);
  }
  level.load1_after = load1();
  for (const JobResult& r : results) {
    ++level.finished;
    if (!r.ok) {
      ++level.failures[r.failure.empty() ? "unknown" : r.failure];
      continue;
    }
    if (r.in_window) ++level.completed;
    if (r.end_s > r.begin_s) {
      level.work_in_window += std::max(0.0, std::min(r.end_s, seconds) - r.begin_s) / (r.end_s - r.begin_s);
    }
    if (std::isfinite(r.start_ms)) level.start_ms.push_back(r.start_ms);
    if (std::isfinite(r.first_ms)) level.first_ms.push_back(r.first_ms);
    if (std::isfinite(r.queue_wait_ms)) level.queue_wait_ms.push_back(r.queue_wait_ms);
    if (std::isfinite(r.wall_ms)) {
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

// Where throughput saturates: the last level before the first one that adds < 10%.
int saturation_level(const std::vector<const Level*>& ls) {
  for (size_t i = 1; i < ls.size(); ++i) {
    if (ls[i]->jobs_per_s() < 1.1 * ls[i - 1]->jobs_per_s()) return ls[i - 1]->clients;
  }
  return 0;  // not within the measured levels
}
// The latency-bounded level: the highest level up to which every level kept its median start
// within 2x of its single-client median and its p99 within 4x of it, with no failures.
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

bool run_ok(const std::vector<std::string>& argv, std::string* why) {
  auto r = motor::test::run_program(argv, {}, std::chrono::seconds(120));
  if (r.exit_code == 0) return true;
  std::string text = trim(r.err.empty() ? r.out : r.err);
  if (const size_t nl = text.rfind('\n'); nl != std::string::npos) text = text.substr(nl + 1);
  *why = fmt::format("exit {}: {}", r.exit_code, text.substr(0, 300));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 8;
  std::vector<int> levels = {1, 2, 4, 8, 16};
  std::string out_dir = "capacity-report";
  std::string runner_config = "cpu_oversubscription = 8\ndefault_memory = 1G\n";
  bool want_bwrap = true, want_podman = true;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--levels") {
      levels = parse_levels(value());
    } else if (a == "--out") {
      out_dir = value();
    } else if (a == "--runner-config") {
      runner_config = value();
      if (!runner_config.empty() && runner_config.back() != '\n') runner_config += '\n';
    } else if (a == "--job-nice") {
      const int n = std::atoi(value().c_str());
      if (n > 0) g_job_prefix = fmt::format("renice -n {} -p $$ >/dev/null; ", n);
    } else if (a == "--peers") {
      const std::string p = value();
      want_bwrap = p.find("bwrap") != std::string::npos;
      want_podman = p.find("podman") != std::string::npos;
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
  if (!positional.empty()) seconds = std::atof(positional[0].c_str());
  if (positional.size() > 1) levels = parse_levels(positional[1]);
  if (seconds <= 0 || levels.empty() || out_dir.empty()) {
    fmt::print(stderr, "capacity: bad arguments (try --help)\n");
    return 2;
  }
  if (geteuid() != 0) {
    fmt::print(stderr, "capacity: run as root (the runner creates cgroups and switches accounts)\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  mkdir(out_dir.c_str(), 0755);

  // --- what it measures on ---
  utsname u{};
  uname(&u);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int usable_cpus = affinity_cpus();
  const int64_t mem_total_kib = meminfo_kib("MemTotal");
  const int64_t mem_avail_kib = meminfo_kib("MemAvailable");
  const std::string load_before = loadavg();
  const std::string kernel = fmt::format("{} {}", u.sysname, u.release);
  const std::string model = cpu_model();

  RunnerProcess runner(runner_config);
  if (!runner.start()) {
    fmt::print(stderr, "capacity: the runner did not start:\n{}\n", runner.log());
    return 1;
  }
  const std::string status = [&] {
    RawClient s(runner.socket());
    if (!s.send_frame(R"({"id":1,"method":"runner.status","params":{}})")) return std::string();
    auto r = s.read_frame();
    return r ? *r : std::string();
  }();
  const std::string cgroup_layout = json_field(status, "/result/cgroup_layout");
  const std::string runner_version = json_field(status, "/result/version");

  fmt::print("capacity report: {} s per level, levels {}\n", seconds, fmt::join(levels, ","));
  fmt::print("host: {} online CPUs ({} usable), {}; {:.1f} GiB RAM ({:.1f} GiB available); {}; cgroups: {}\n", online,
             usable_cpus, model, static_cast<double>(mem_total_kib) / 1048576.0,
             static_cast<double>(mem_avail_kib) / 1048576.0, kernel, cgroup_layout);
  fmt::print("load average before: {} (1, 5, 15 min)\n", load_before);
  std::string cfg_line = runner_config;
  std::replace(cfg_line.begin(), cfg_line.end(), '\n', ';');
  fmt::print("runner: motor-runner {} with config: {} (plus the harness's cgroup_parent and job_log_max_size = 64M)\n",
             runner_version, cfg_line);
  if (!g_job_prefix.empty()) fmt::print("EXPERIMENT: every job first runs `{}`\n", g_job_prefix);
  fmt::print("job mix, each client in turn from its own offset:");
  for (const JobKind& k : kKinds) fmt::print(" {}{}", k.name, k.memory ? fmt::format(" (memory {})", k.memory) : "");
  fmt::print("\n");

  // --- the systems ---
  std::atomic<int> next_id{1};
  struct System {
    std::string name;
    RunOne run;
    const RunnerProcess* runner = nullptr;
    std::string note;
  };
  std::vector<System> systems;
  systems.push_back({"motor",
                     [&](size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
                       return motor_job(runner.socket(), kind, next_id++, deadline, running);
                     },
                     &runner, "request -> `started` record (start); -> first output record (first byte)"});

  PeerCgroups peer_cgroups;
  std::string bwrap_status = "skipped: not asked for (--peers)";
  if (want_bwrap) {
    std::string why;
    if (access("/usr/bin/bwrap", X_OK) != 0) {
      bwrap_status = "skipped: /usr/bin/bwrap not installed (scripts/setup installs bubblewrap)";
    } else if (!run_ok(bwrap_argv("echo ok"), &why)) {
      bwrap_status = "skipped: it does not start here: " + why;
    } else {
      bwrap_status = peer_cgroups.usable()
                         ? "ran; memcap jobs in a " + peer_cgroups.layout() + " cgroup the bench makes per job"
                         : "ran; memcap jobs UNCAPPED: " + peer_cgroups.why_not();
      systems.push_back({"bwrap",
                         [&](size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
                           return bwrap_job(peer_cgroups, kind, deadline, running);
                         },
                         nullptr, "spawn -> first output byte"});
    }
  }
  PodmanRoot podman_root;
  std::string podman_status = "skipped: not asked for (--peers)";
  if (want_podman) {
    std::string why;
    if (access("/usr/bin/podman", X_OK) != 0) {
      podman_status = "skipped: /usr/bin/podman not installed (bench/setup installs it)";
    } else if (podman_root.dir().empty()) {
      podman_status = "skipped: could not make a temporary rootfs";
    } else if (!run_ok(podman_argv(podman_root.dir(), 0), &why)) {
      podman_status = "skipped: it does not start here: " + why;
    } else {
      podman_status = "ran: --runtime runc, --rootfs of the host's /usr (no image, no registry); memcap jobs --memory 256m";
      systems.push_back({"podman",
                         [&](size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
                           return spawn_job(Spawn{podman_argv(podman_root.dir(), kind), -1}, kind, deadline, running);
                         },
                         nullptr, "spawn -> first output byte"});
    }
  }
  fmt::print("bwrap: {}\npodman: {}\n", bwrap_status, podman_status);

  // Warm-up, not measured: each kind once through each system (page cache, first cgroups).
  for (const System& s : systems) {
    std::atomic<int> running{0};
    for (size_t k = 0; k < kKindCount; ++k) {
      const JobResult r = s.run(k, Clock::now() + std::chrono::hours(1), running);
      if (!r.ok) {
        fmt::print(stderr, "capacity: warm-up job \"{}\" through {} failed: {}\n", kKinds[k].name, s.name, r.failure);
        if (s.name == "motor") {
          fmt::print(stderr, "{}\n", runner.log());
          return 1;
        }
      }
    }
  }
  const double runner_rss_idle = process_rss_mib(runner.pid());

  // --- the levels: at each, every system in turn ---
  std::vector<Level> results;
  for (int clients : levels) {
    for (const System& s : systems) {
      fmt::print(stderr, "  level {:>2} clients: {}...\n", clients, s.name);
      results.push_back(run_level(s.name, clients, seconds, s.run, s.runner));
    }
  }
  const double runner_rss_end = process_rss_mib(runner.pid());
  const std::string load_after = loadavg();
  runner.stop();
  motor::test::write_file(out_dir + "/runner.log", runner.log());

  auto of = [&](const std::string& system) {
    std::vector<const Level*> v;
    for (const Level& l : results) {
      if (l.system == system) v.push_back(&l);
    }
    return v;
  };
  auto at = [&](const std::string& system, int clients) -> const Level* {
    for (const Level& l : results) {
      if (l.system == system && l.clients == clients) return &l;
    }
    return nullptr;
  };

  // --- the report ---
  for (const System& s : systems) {
    const auto ls = of(s.name);
    const Level& b = *ls.front();
    const double b_thr = b.jobs_per_s(), b_s50 = percentile(b.own_start(), 0.5);
    const double b_cpu = percentile(b.wall_ms_by_kind[1], 0.5);
    fmt::print("\n{}: start = {}; x = ratio to its {}-client level\n", s.name, s.note, b.clients);
    fmt::print("{:>7} {:>5} {:>7} {:>6} | {:>9} {:>9} {:>6} {:>6} | {:>9} {:>9} | {:>9} {:>7} | {:>7} {:>10} | {}\n", "clients",
               "done", "jobs/s", "x", "start p50", "start p99", "x p50", "x p99", "1st-byte50", "1st-byte99", "wall p50",
               "cpu-job x", "running", "host busy", "failures");
    for (const Level* l : ls) {
      std::string failures;
      for (const auto& [reason, count] : l->failures) failures += fmt::format("{}{}={}", failures.empty() ? "" : " ", reason, count);
      const double s50 = percentile(l->own_start(), 0.5), s99 = percentile(l->own_start(), 0.99);
      fmt::print("{:>7} {:>5} {:>7.2f} {:>6} | {:>7}ms {:>7}ms {:>6} {:>6} | {:>7}ms {:>7}ms | {:>7}ms {:>9} | {:>7.2f} {:>4.2f} cores | {}\n",
                 l->clients, l->completed, l->jobs_per_s(), ratio(l->jobs_per_s(), b_thr), ms(s50), ms(s99), ratio(s50, b_s50),
                 ratio(s99, b_s50), ms(l->first_p50()), ms(percentile(l->first_ms, 0.99)), ms(percentile(l->wall_ms, 0.5)),
                 ratio(percentile(l->wall_ms_by_kind[1], 0.5), b_cpu), l->avg_running,
                 l->host_busy_cores(), failures.empty() ? "none" : failures);
    }
  }

  // motor's own cost.
  const auto motor_levels = of("motor");
  fmt::print("\nmotor-runner's own cost (idle RSS after warm-up {:.1f} MiB):\n", runner_rss_idle);
  fmt::print("{:>7} | {:>9} {:>9} | {:>9} {:>11} | {:>8} {:>8} {:>13} | {:>10} {:>11} | {:>6} | {}\n", "clients", "qwait p50",
             "qwait p99", "CPU %core", "%core/job", "RSS avg", "RSS peak", "MiB/run. job", "loop stall", "stall/start", "load1",
             "runner.status means: running, queued (max), CPUs claimed; loop thread's run-queue wait");
  const double motor_b_s50 = percentile(motor_levels.front()->start_ms, 0.5);
  for (const Level* l : motor_levels) {
    const double cpu_pct = 100.0 * l->runner_cpu_s / l->elapsed;
    fmt::print("{:>7} | {:>7}ms {:>7}ms | {:>9.1f} {:>11} | {:>6.1f}Mi {:>6.1f}Mi {:>13} | {:>8.1f}ms {:>11} | {:>6.2f} | {:.1f}, {:.1f} ({:.0f}), {:.1f}; {:.1f}% of the time\n",
               l->clients, ms(percentile(l->queue_wait_ms, 0.5)), ms(percentile(l->queue_wait_ms, 0.99)), cpu_pct,
               l->avg_running > 0 ? fmt::format("{:.2f}", cpu_pct / l->avg_running) : "-", l->runner_rss_mean,
               l->runner_rss_peak,
               l->avg_running > 0 ? fmt::format("{:.2f}", l->runner_mib_per_running_job()) : "-",
               l->stall_us / 1000.0, ratio(l->stall_us / 1000.0, motor_b_s50), l->load1_after, l->status_running,
               l->status_queue, l->status_queue_max, l->status_cpus_claimed, l->runner_runq_wait_pct);
  }
  fmt::print("calls the runner logged as stalling its loop (>= 5 ms), per level: what n=count p50/max ms\n");
  for (const Level* l : motor_levels) {
    std::string calls;
    for (const auto& [what, v] : l->slow_calls) {
      calls += fmt::format("{}{} n={} {:.0f}/{:.0f}", calls.empty() ? "" : "; ", what, v.size(), percentile(v, 0.5),
                           *std::max_element(v.begin(), v.end()));
    }
    fmt::print("{:>7} | {}\n", l->clients, calls.empty() ? "none" : calls);
  }

  // motor against the peers, level by level (first output byte: the one start figure all share).
  if (systems.size() > 1) {
    fmt::print("\nmotor against the peers at the same level (ratio motor / peer: first-byte < 1 = motor's jobs begin sooner; jobs/s > 1 = motor completes more):\n");
    fmt::print("{:>7}", "clients");
    for (size_t i = 1; i < systems.size(); ++i) {
      fmt::print(" | {:>10} {:>10} {:>11}", "1st-byte50", "1st-byte99", "jobs/s");
    }
    fmt::print("\n{:>7}", "");
    for (size_t i = 1; i < systems.size(); ++i) fmt::print(" | {:^34}", "vs " + systems[i].name);
    fmt::print("\n");
    for (int clients : levels) {
      const Level* m = at("motor", clients);
      fmt::print("{:>7}", clients);
      for (size_t i = 1; i < systems.size(); ++i) {
        const Level* p = at(systems[i].name, clients);
        fmt::print(" | {:>10} {:>10} {:>11}", ratio(m->first_p50(), p->first_p50()),
                   ratio(percentile(m->first_ms, 0.99), percentile(p->first_ms, 0.99)), ratio(m->jobs_per_s(), p->jobs_per_s()));
      }
      fmt::print("\n");
    }
  }

  // Verdicts and the rule of thumb.
  const double cores = static_cast<double>(usable_cpus > 0 ? usable_cpus : online);
  fmt::print("\nload average after: {} (before: {})\n", load_after, load_before);
  struct Verdict {
    std::string system;
    int saturated = 0, bounded = 0;
    double peak = 0, peak_x = 0;
    int peak_at = 0;
  };
  std::vector<Verdict> verdicts;
  for (const System& s : systems) {
    const auto ls = of(s.name);
    Verdict v;
    v.system = s.name;
    v.saturated = saturation_level(ls);
    v.bounded = latency_bounded_level(ls);
    for (const Level* l : ls) {
      if (l->jobs_per_s() > v.peak) {
        v.peak = l->jobs_per_s();
        v.peak_at = l->clients;
      }
    }
    v.peak_x = ls.front()->jobs_per_s() > 0 ? v.peak / ls.front()->jobs_per_s() : NAN;
    verdicts.push_back(v);
    fmt::print("{:>6}: throughput {}; peak {:.2f} jobs/s at {} clients = {:.2f}x one client; starts stay within 2x (p50) / 4x "
               "(p99) of one client's median up to {} clients\n",
               s.name,
               v.saturated ? fmt::format("saturates at {} clients ({:.1f} per CPU): the next level adds < 10%", v.saturated,
                                         v.saturated / cores)
                           : std::string("does not saturate within the measured levels"),
               v.peak, v.peak_at, v.peak_x, v.bounded ? std::to_string(v.bounded) : std::string("no"));
  }
  for (size_t i = 1; i < verdicts.size(); ++i) {
    fmt::print("motor's peak throughput is {:.2f}x {}'s in this run\n", verdicts[0].peak / verdicts[i].peak,
               verdicts[i].system);
  }

  // Memory per job: what admission reserves (the job's cap) plus the runner's own share.
  const Verdict& mv = verdicts[0];
  double runner_mib_per_job = 0;
  {
    double worst = 0;
    for (const Level* l : motor_levels) {
      if (l->avg_running >= 1 && std::isfinite(l->runner_mib_per_running_job())) {
        worst = std::max(worst, l->runner_mib_per_running_job());
      }
    }
    runner_mib_per_job = worst;
  }
  const int knee = mv.saturated ? mv.saturated : levels.back();
  const double jobs_per_core_thr = knee / cores;
  const double jobs_per_core_lat = mv.bounded / cores;
  const Level* knee_level = at("motor", knee);
  const double cpu_pct_per_job =
      knee_level && knee_level->avg_running > 0 ? 100.0 * knee_level->runner_cpu_s / knee_level->elapsed / knee_level->avg_running : NAN;
  const std::string rule = fmt::format(
      "plan {:.1f} concurrent jobs per core for throughput ({}), "
      "{:.1f} per core where callers need starts within 2x of a single client's; memory per job = the job's cap "
      "(what admission reserves: default_memory, or the request's `memory`) + {:.2f} MiB of runner memory per running "
      "job; the runner itself costs {:.1f}% of a core per running job at that concurrency",
      jobs_per_core_thr,
      mv.saturated ? fmt::format("beyond {} at once this host completed no more", knee)
                   : fmt::format("a lower bound: throughput still grew at {}, the highest level measured", knee),
      jobs_per_core_lat, std::max(runner_mib_per_job, 0.0), cpu_pct_per_job);
  const std::string assumptions = fmt::format(
      "jobs like this mix (sub-second shell jobs: a quarter CPU-bound, a quarter output-heavy, a quarter under a 256 MiB "
      "cap); {} usable CPUs, load average {} before the run (other tenants' work shares the cores); runner config as "
      "printed (cpu_oversubscription lets more jobs than cores run, so admission is not the limit); for long CPU-bound "
      "jobs the per-core figure tends to 1 and only the memory rule carries over",
      usable_cpus, load_before);
  fmt::print("\nrule of thumb: {}\nassumptions: {}\n", rule, assumptions);

  // --- JSON ---
  std::string j = "{";
  j += fmt::format(R"("seconds_per_level":{},"levels":[{}],"job_prefix":"{}",)", seconds, fmt::join(levels, ","),
                   json_escape(g_job_prefix));
  j += fmt::format(
      R"("host":{{"online_cpus":{},"usable_cpus":{},"cpu_model":"{}","mem_total_kib":{},"mem_available_kib":{},"kernel":"{}","cgroup_layout":"{}","loadavg_before":"{}","loadavg_after":"{}"}},)",
      online, usable_cpus, json_escape(model), mem_total_kib, mem_avail_kib, json_escape(kernel), json_escape(cgroup_layout),
      load_before, load_after);
  j += fmt::format(R"("runner":{{"version":"{}","config":"{}","rss_idle_mib":{},"rss_end_mib":{}}},)", json_escape(runner_version),
                   json_escape(runner_config), num(runner_rss_idle, 1), num(runner_rss_end, 1));
  j += R"("mix":[)";
  for (size_t k = 0; k < kKindCount; ++k) {
    j += fmt::format(R"({}{{"kind":"{}","command":"{}","memory":{},"stands_for":"{}"}})", k ? "," : "", kKinds[k].name,
                     json_escape(kKinds[k].command), kKinds[k].memory ? fmt::format("\"{}\"", kKinds[k].memory) : "null",
                     json_escape(kKinds[k].stands_for));
  }
  j += fmt::format(R"(],"peers":{{"bwrap":"{}","podman":"{}"}},"results":[)", json_escape(bwrap_status),
                   json_escape(podman_status));
  bool first = true;
  for (const Level& l : results) {
    const Level& b = *of(l.system).front();
    const double b_s50 = percentile(b.own_start(), 0.5);
    std::string failures;
    for (const auto& [reason, count] : l.failures) failures += fmt::format("{}\"{}\":{}", failures.empty() ? "" : ",", json_escape(reason), count);
    std::string by_kind;
    for (size_t k = 0; k < kKindCount; ++k) {
      by_kind += fmt::format(R"({}"{}":{})", k ? "," : "", kKinds[k].name, num(percentile(l.wall_ms_by_kind[k], 0.5), 1));
    }
    const double cpu_pct = 100.0 * l.runner_cpu_s / l.elapsed;
    std::string slow;
    for (const auto& [what, v] : l.slow_calls) {
      slow += fmt::format(R"({}"{}":{{"n":{},"p50_ms":{},"max_ms":{}}})", slow.empty() ? "" : ",", json_escape(what), v.size(),
                          num(percentile(v, 0.5), 1), num(*std::max_element(v.begin(), v.end()), 1));
    }
    j += fmt::format(
        R"({}{{"system":"{}","clients":{},"seconds":{},"elapsed_s":{},"completed":{},"finished":{},"jobs_per_s":{},"jobs_per_s_x":{},)"
        R"("start_ms_p50":{},"start_ms_p99":{},"start_p50_x":{},"start_p99_x":{},"first_output_ms_p50":{},"first_output_ms_p99":{},)"
        R"("wall_ms_p50":{},"wall_ms_p99":{},"wall_ms_p50_by_kind":{{{}}},"queue_wait_ms_p50":{},"queue_wait_ms_p99":{},)"
        R"("avg_running":{},"host_cpu_s_per_job":{},"runner_cpu_pct_core":{},"runner_cpu_pct_core_per_running_job":{},)"
        R"("runner_runqueue_wait_pct":{},"status_running_mean":{},"status_queue_depth_mean":{},"status_queue_depth_max":{},"status_cpus_claimed_mean":{},"runner_rss_mib_before":{},"runner_rss_mib_mean":{},"runner_rss_mib_peak":{},"runner_mib_per_running_job":{},"loop_worst_stall_us":{},"load1_after":{},"failures":{{{}}},"slow_calls":{{{}}},"samples":{}}})",
        first ? "" : ",", l.system, l.clients, l.seconds, num(l.elapsed, 2), l.completed, l.finished, num(l.jobs_per_s(), 3),
        ratio(l.jobs_per_s(), b.jobs_per_s()) == "-" ? "null" : ratio(l.jobs_per_s(), b.jobs_per_s()),
        num(percentile(l.own_start(), 0.5)), num(percentile(l.own_start(), 0.99)),
        num(percentile(l.own_start(), 0.5) / b_s50), num(percentile(l.own_start(), 0.99) / b_s50), num(l.first_p50()),
        num(percentile(l.first_ms, 0.99)), num(percentile(l.wall_ms, 0.5), 1), num(percentile(l.wall_ms, 0.99), 1), by_kind,
        num(percentile(l.queue_wait_ms, 0.5), 1), num(percentile(l.queue_wait_ms, 0.99), 1), num(l.avg_running),
        num(l.finished ? l.host_cpu_s / l.finished : NAN, 3), num(cpu_pct, 1),
        num(l.avg_running > 0 ? cpu_pct / l.avg_running : NAN), num(l.runner_runq_wait_pct, 1), num(l.status_running), num(l.status_queue),
        num(l.status_queue_max, 0), num(l.status_cpus_claimed), num(l.runner_rss_before, 1), num(l.runner_rss_mean, 1), num(l.runner_rss_peak, 1),
        num(l.runner_mib_per_running_job()), num(l.stall_us, 0),
        l.load1_after, failures, slow, l.own_start().size());
    first = false;
  }
  j += R"(],"verdicts":[)";
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const Verdict& v = verdicts[i];
    j += fmt::format(
        R"({}{{"system":"{}","saturates_at_clients":{},"latency_bounded_clients":{},"peak_jobs_per_s":{},"peak_at_clients":{},"peak_x_single":{},"motor_peak_x":{}}})",
        i ? "," : "", v.system, v.saturated ? std::to_string(v.saturated) : "null", v.bounded, num(v.peak, 3), v.peak_at,
        num(v.peak_x), num(v.peak > 0 ? verdicts[0].peak / v.peak : NAN));
  }
  j += fmt::format(
      R"(],"rule_of_thumb":{{"jobs_per_core_throughput":{},"jobs_per_core_latency_bounded":{},"runner_mib_per_running_job":{},"runner_cpu_pct_core_per_running_job":{},"text":"{}","assumptions":"{}"}}}})",
      num(jobs_per_core_thr), num(jobs_per_core_lat), num(runner_mib_per_job), num(cpu_pct_per_job), json_escape(rule),
      json_escape(assumptions));
  j += "\n";
  std::ofstream(out_dir + "/capacity.json") << j;

  // --- plot data and gnuplot script ---
  {
    std::ofstream dat(out_dir + "/capacity.dat");
    for (const System& s : systems) {
      dat << "# " << s.name << ": clients jobs_per_s start_p50_ms start_p99_ms first_p50_ms first_p99_ms\n";
      for (const Level* l : of(s.name)) {
        dat << fmt::format("{} {} {} {} {} {}\n", l->clients, num(l->jobs_per_s(), 3), num(percentile(l->own_start(), 0.5)),
                           num(percentile(l->own_start(), 0.99)), num(l->first_p50()), num(percentile(l->first_ms, 0.99)));
      }
      dat << "\n\n";
    }
  }
  {
    std::string lat, thr;
    const char* colors[] = {"#1b6ac9", "#d9480f", "#2b8a3e"};
    for (size_t i = 0; i < systems.size(); ++i) {
      const std::string& n = systems[i].name;
      const char* c = colors[i % 3];
      if (n == "motor") {
        lat += fmt::format("'capacity.dat' index {} using 1:3 with linespoints lw 2 lc rgb '{}' title 'motor start p50 (started)', ", i, c);
        lat += fmt::format("'' index {} using 1:4 with linespoints lw 2 dt 2 lc rgb '{}' title 'motor start p99', ", i, c);
        lat += fmt::format("'' index {} using 1:5 with linespoints lw 1 dt 3 pt 6 lc rgb '{}' title 'motor first byte p50', ", i, c);
      } else {
        lat += fmt::format("'' index {} using 1:5 with linespoints lw 2 lc rgb '{}' title '{} first byte p50', ", i, c, n);
        lat += fmt::format("'' index {} using 1:6 with linespoints lw 2 dt 2 lc rgb '{}' title '{} first byte p99', ", i, c, n);
      }
      thr += fmt::format("{}index {} using 1:2 with linespoints lw 2 lc rgb '{}' title '{}', ", i ? "'' " : "'capacity.dat' ", i, c, n);
    }
    lat.resize(lat.size() - 2);
    thr.resize(thr.size() - 2);
    std::ofstream gp(out_dir + "/capacity.gp");
    gp << fmt::format(
        "# gnuplot capacity.gp (run in this directory): capacity.svg\n"
        "set terminal svg size 1200,500 dynamic font 'sans,11'\n"
        "set output 'capacity.svg'\n"
        "set multiplot layout 1,2 title \"Motor capacity: {} CPUs, {}, load {} before / {} after, {} s per level\"\n"
        "set logscale x 2\nset xrange [0.8:{}]\nset xtics ({})\nset xlabel 'concurrent clients'\nset grid\nset key top left font ',9'\n"
        "set logscale y\nset ylabel 'start latency (ms)'\nset title 'start latency'\nplot {}\n"
        "unset logscale y\nset yrange [0:*]\nset ylabel 'jobs per second'\nset title 'sustained throughput (jobs/s)'\nplot {}\n"
        "unset multiplot\n",
        usable_cpus, kernel, load_before.substr(0, load_before.find(' ')), load_after.substr(0, load_after.find(' ')), seconds,
        levels.back() * 1.25, fmt::join(levels, ","), lat, thr);
  }
  std::string plot_note;
  if (access("/usr/bin/gnuplot", X_OK) == 0) {
    auto r = motor::test::run_program({"/bin/sh", "-c", "cd '" + out_dir + "' && /usr/bin/gnuplot capacity.gp"});
    plot_note = r.exit_code == 0 ? out_dir + "/capacity.svg" : "gnuplot failed: " + trim(r.err);
  } else {
    plot_note = "not drawn: gnuplot is not installed (bench/setup installs gnuplot-nox)";
  }
  fmt::print("\njson: {}/capacity.json\nplot: {}\n", out_dir, plot_note);
  return 0;
}
