// Issue 20's cancel row: exec.cancel of a job running 1,000 processes, from the request to its
// terminal record on the caller's stream, against the kernel's own cgroup.kill of 1,000
// processes until their cgroup is unpopulated (cgroup.events "populated 0"), interleaved,
// medians (bench/README.md). The peer's cgroup is on the unified (cgroup2) hierarchy, as the
// runner's jobs are killed there on this hybrid host (sandbox/cgroup_v1.cpp); on a host whose
// cgroup2 has no cgroup.kill the peer cannot be measured and the bench says so.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "stats.hpp"
#include "support/runner_harness.hpp"

namespace {

using motor::bench::median;
using Clock = std::chrono::steady_clock;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

constexpr int kProcesses = 1000;
// 1,000 sleepers, then a line once every one of them has been started.
const std::string kScript = fmt::format("for i in $(seq {}); do sleep 600 & done; echo ready; wait", kProcesses);

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Motor: the job's output reaches "ready", then exec.cancel; ms until its terminal record.
double motor_cancel(const RunnerProcess& runner, int round) {
  RawClient c(runner.socket());
  c.send_frame(fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"{}"}}}})", round, kScript));
  std::string job;
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(60000));
    if (!f) return -1;
    const std::string type = json_field(*f, "/type");
    if (type == "accepted") job = json_field(*f, "/job_id");
    if (type == "terminal") return -1;  // ended before it was cancelled
    if (type == "output") break;  // its only output: "ready", once every sleeper is started
  }
  RawClient canceller(runner.socket());
  const auto t0 = Clock::now();
  canceller.send_frame(fmt::format(R"({{"id":1,"method":"exec.cancel","params":{{"job_id":"{}"}}}})", job));
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(60000));
    if (!f) return -1;
    if (json_field(*f, "/type") == "terminal") return ms_since(t0);
  }
}

// The peer: the same script in a cgroup2 cgroup of our own, then cgroup.kill; ms until
// cgroup.events says it is unpopulated (woken by inotify, as the kernel notifies it).
double kernel_kill(const std::string& parent, int round) {
  const std::string dir = fmt::format("{}/peer-{}", parent, round);
  if (mkdir(dir.c_str(), 0755) != 0) return -1;
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    std::ofstream(dir + "/cgroup.procs") << getpid();
    dup2(ready[1], 1);
    close(ready[0]);
    execl("/bin/sh", "sh", "-c", kScript.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  char buf[16];
  const ssize_t n = read(ready[0], buf, sizeof buf);  // "ready\n": every sleeper started
  close(ready[0]);
  double ms = -1;
  const int events = inotify_init1(IN_CLOEXEC);
  inotify_add_watch(events, (dir + "/cgroup.events").c_str(), IN_MODIFY);
  auto populated = [&] {
    std::ifstream f(dir + "/cgroup.events");
    std::stringstream s;
    s << f.rdbuf();
    return s.str().find("populated 1") != std::string::npos;
  };
  if (n > 0) {
    const auto t0 = Clock::now();
    std::ofstream(dir + "/cgroup.kill") << "1";
    while (populated()) {
      pollfd p{events, POLLIN, 0};
      if (poll(&p, 1, 1000) > 0) {
        char ev[4096];
        (void)!read(events, ev, sizeof ev);
      }
    }
    ms = ms_since(t0);
  }
  close(events);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  for (int i = 0; i < 200 && rmdir(dir.c_str()) != 0; ++i) usleep(5000);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  if (geteuid() != 0) {
    fmt::print(stderr, "bench: run as root (the runner creates cgroups and switches accounts)\n");
    return 1;
  }
  const std::string parent = fmt::format("/sys/fs/cgroup/unified/motor-bench-cancel-{}", getpid());
  if (access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) != 0 || mkdir(parent.c_str(), 0755) != 0) {
    fmt::print(stderr, "bench: no cgroup2 hierarchy at /sys/fs/cgroup/unified to measure cgroup.kill on\n");
    return 1;
  }
  RunnerProcess runner(fmt::format("pids_max = {}\n", kProcesses * 2));
  if (!runner.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", runner.log());
    rmdir(parent.c_str());
    return 1;
  }
  std::vector<double> motor_ms, kernel_ms;
  for (int round = 0; round < rounds; ++round) {
    const double m = motor_cancel(runner, round + 1);
    const double k = kernel_kill(parent, round);
    if (m > 0) motor_ms.push_back(m);
    if (k > 0) kernel_ms.push_back(k);
  }
  runner.stop();
  rmdir(parent.c_str());
  if (motor_ms.empty() || kernel_ms.empty()) {
    fmt::print(stderr, "bench: no complete round ({} motor, {} kernel)\n", motor_ms.size(), kernel_ms.size());
    return 1;
  }
  fmt::print("cancel of {} processes, {} interleaved rounds (medians):\n", kProcesses, rounds);
  fmt::print("  motor exec.cancel until the terminal record        {:8.1f} ms\n", median(motor_ms));
  fmt::print("  cgroup.kill (cgroup2) until the cgroup is unpopulated {:8.1f} ms\n", median(kernel_ms));
  const double ratio = median(motor_ms) / median(kernel_ms);
  fmt::print("  ratio motor / cgroup.kill (median): {:.2f}   goal <= 1.2: {}\n", ratio, ratio <= 1.2 ? "met" : "not met");
  return 0;
}
