// Issue 20's cancel row: exec.cancel of a job running 1,000 processes, from the request to its
// terminal record on the caller's stream, against the kernel's own cgroup.kill of 1,000
// processes until their cgroup is unpopulated (cgroup.events "populated 0"), interleaved,
// medians (bench/README.md). The peer's cgroup is on the unified (cgroup2) hierarchy, as the
// runner's jobs are killed there on this hybrid host (sandbox/cgroup_v1.cpp); on a host whose
// cgroup2 has no cgroup.kill the peer cannot be measured and the bench says so. A second peer,
// shaped like a job here (its v1 cgroups and PID namespace), tells the kernel's share of the
// difference from the runner's.
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
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runner_bench.hpp"
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

void write_to(const std::string& path, const std::string& value) { std::ofstream(path) << value; }

std::string read_trimmed(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  std::getline(f, text);
  return text;
}

// The peers' parents: ours on the cgroup2 hierarchy, and (for the job-shaped peer) in the v1
// memory, pids and cpuset hierarchies a job of this hybrid host is limited in.
struct PeerParents {
  std::string unified;
  std::vector<std::string> v1;  // memory, pids, cpuset
};

// The peer: the same script in cgroups of our own, then cgroup.kill; ms until cgroup.events
// says it is unpopulated (woken by inotify, as the kernel notifies it). `as_a_job`: not only a
// cgroup2 cgroup (the goal's peer) but a job's whole layout here, to tell the kernel's share
// from the runner's: v1 memory and pids limits, a one-CPU cpuset (widened before the kill, as the
// runner does: sandbox/cgroup_v1.cpp) and a PID namespace.
double kernel_kill(const PeerParents& parents, int round, bool as_a_job) {
  const std::string name = fmt::format("/peer-{}{}", round, as_a_job ? "-job" : "");
  std::vector<std::string> dirs;  // the v1 ones first, the unified one last
  if (as_a_job) {
    for (const auto& p : parents.v1) dirs.push_back(p + name);
  }
  dirs.push_back(parents.unified + name);
  for (const auto& d : dirs) {
    if (mkdir(d.c_str(), 0755) != 0) return -1;
  }
  if (as_a_job) {
    write_to(dirs[0] + "/memory.limit_in_bytes", std::to_string(4LL << 30));
    write_to(dirs[1] + "/pids.max", std::to_string(kProcesses * 2));
    write_to(dirs[2] + "/cpuset.cpus", "0");
    write_to(dirs[2] + "/cpuset.mems", read_trimmed(parents.v1[2] + "/cpuset.mems"));
  }
  const std::string& dir = dirs.back();
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& d : dirs) write_to(d + "/cgroup.procs", std::to_string(getpid()));
    dup2(ready[1], 1);
    close(ready[0]);
    if (as_a_job) {
      execl("/usr/bin/unshare", "unshare", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", kScript.c_str(),
            static_cast<char*>(nullptr));
    } else {
      execl("/bin/sh", "sh", "-c", kScript.c_str(), static_cast<char*>(nullptr));
    }
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
    if (as_a_job) write_to(dirs[2] + "/cpuset.cpus", read_trimmed(parents.v1[2] + "/cpuset.cpus"));
    write_to(dir + "/cgroup.kill", "1");
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
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) {
    for (int i = 0; i < 200 && rmdir(d->c_str()) != 0; ++i) usleep(5000);
  }
  return ms;
}

}  // namespace

namespace {

// Ours under each hierarchy; the v1 ones only where this host has them (else no job-shaped peer).
std::optional<PeerParents> make_parents() {
  PeerParents parents;
  const std::string name = fmt::format("motor-bench-cancel-{}", getpid());
  parents.unified = "/sys/fs/cgroup/unified/" + name;
  if (access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) != 0 || mkdir(parents.unified.c_str(), 0755) != 0) {
    return std::nullopt;
  }
  for (const char* h : {"memory", "pids", "cpuset"}) {
    const std::string dir = fmt::format("/sys/fs/cgroup/{}/{}", h, name);
    if (mkdir(dir.c_str(), 0755) != 0) break;
    parents.v1.push_back(dir);
  }
  if (parents.v1.size() == 3) {
    for (const char* file : {"/cpuset.cpus", "/cpuset.mems"}) {
      write_to(parents.v1[2] + file, read_trimmed(std::string("/sys/fs/cgroup/cpuset") + file));
    }
  }
  return parents;
}

void remove_parents(const PeerParents& parents) {
  for (const auto& d : parents.v1) rmdir(d.c_str());
  rmdir(parents.unified.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const auto wanted = motor::bench::rounds_to_run(argc, argv, 9);
  if (!wanted) return 1;
  const int rounds = *wanted;
  const auto parents = make_parents();
  if (!parents) {
    fmt::print(stderr, "bench: no cgroup2 hierarchy at /sys/fs/cgroup/unified to measure cgroup.kill on\n");
    return 1;
  }
  const bool job_shaped = parents->v1.size() == 3;
  RunnerProcess runner(fmt::format("pids_max = {}\n", kProcesses * 2));
  if (!motor::bench::start_runner(runner)) {
    remove_parents(*parents);
    return 1;
  }
  std::vector<double> motor_ms, kernel_ms, job_shaped_ms;
  for (int round = 0; round < rounds; ++round) {
    const double m = motor_cancel(runner, round + 1);
    const double k = kernel_kill(*parents, round, false);
    const double j = job_shaped ? kernel_kill(*parents, round, true) : -1;
    if (m > 0) motor_ms.push_back(m);
    if (k > 0) kernel_ms.push_back(k);
    if (j > 0) job_shaped_ms.push_back(j);
  }
  runner.stop();
  remove_parents(*parents);
  if (motor_ms.empty() || kernel_ms.empty()) {
    fmt::print(stderr, "bench: no complete round ({} motor, {} kernel)\n", motor_ms.size(), kernel_ms.size());
    return 1;
  }
  fmt::print("cancel of {} processes, {} interleaved rounds (medians):\n", kProcesses, rounds);
  fmt::print("  motor exec.cancel until the terminal record        {:8.1f} ms\n", median(motor_ms));
  fmt::print("  cgroup.kill (cgroup2) until the cgroup is unpopulated {:8.1f} ms\n", median(kernel_ms));
  if (!job_shaped_ms.empty()) {
    fmt::print("  the same kill of a job-shaped peer (v1 memory, pids, one-CPU cpuset widened, PID namespace) {:8.1f} ms\n",
               median(job_shaped_ms));
    fmt::print("  ratio motor / job-shaped peer (the runner's own share): {:.2f}\n", median(motor_ms) / median(job_shaped_ms));
  }
  const double ratio = median(motor_ms) / median(kernel_ms);
  fmt::print("  ratio motor / cgroup.kill (median): {:.2f}   goal <= 1.2: {}\n", ratio, ratio <= 1.2 ? "met" : "not met");
  return 0;
}
