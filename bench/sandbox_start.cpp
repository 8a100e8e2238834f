// Sandboxed job start against peers, as ratios measured in the same run (issue 3, "Benchmark").
//
//  motor    request (exec.run of `/bin/echo x`) sent to a real runner, to the job's first
//           output record: admission, cgroup, clone3 into six namespaces, the empty root,
//           binds, pivot_root, caps, no_new_privs, seccomp, motor-init, exec, the pipe, the loop.
//  bwrap    `bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --ro-bind /usr
//           /usr` + the merged-/usr links + `--dev /dev --proc /proc --tmpfs /tmp /bin/echo x`,
//           from the spawn call to the first byte on its stdout pipe.
//  unshare  `unshare --pid --fork --mount --net --ipc --uts --cgroup /bin/echo x`, likewise.
//
// N rounds (argv[1], default 200); each round runs all three once, in a rotating order, so
// that a burst of load elsewhere on the host hits each alike. Prints medians, p90 and the ratios
// motor/bwrap and motor/unshare (medians). Run as root.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "first_output.hpp"
#include "stats.hpp"
#include "support/runner_harness.hpp"

extern char** environ;

namespace {

using motor::bench::median;
constexpr auto motor_once = motor::bench::first_output_us;
using motor::bench::percentile;
using Clock = std::chrono::steady_clock;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

bool is_symlink(const char* path) {
  struct stat st {};
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

std::vector<std::string> bwrap_argv() {
  std::vector<std::string> a{"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop",
                             "ALL", "--ro-bind", "/usr", "/usr"};
  // The merged-/usr links, as symlinks (as Motor recreates them).
  for (const char* link : {"/bin", "/lib", "/lib64", "/sbin"}) {
    if (!is_symlink(link)) continue;
    char target[256];
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    a.insert(a.end(), {"--symlink", std::string(target, static_cast<size_t>(n)), link});
  }
  a.insert(a.end(), {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "/bin/echo", "x"});
  return a;
}

const std::vector<std::string> kUnshareArgv = {"/usr/bin/unshare", "--pid", "--fork", "--mount", "--net", "--ipc",
                                               "--uts", "--cgroup", "/bin/echo", "x"};

// Spawns argv with stdout on a pipe: microseconds from the call to the first byte, or -1.
double spawn_once(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  const auto t0 = Clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  char c;
  const ssize_t n = read(fds[0], &c, 1);
  const auto t1 = Clock::now();
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != 1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}


}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 200;
  if (geteuid() != 0 || runs <= 0) {
    fmt::print(stderr, "usage: motor_bench_sandbox [RUNS]  (as root: the runner creates cgroups)\n");
    return 1;
  }
  RunnerProcess runner("max_running_jobs = 64\n");
  if (!runner.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", runner.log());
    return 1;
  }
  const std::vector<std::string> bwrap = bwrap_argv();
  std::string bwrap_line;
  for (const auto& s : bwrap) bwrap_line += (bwrap_line.empty() ? "" : " ") + s;

  // Warm up every path (page cache, the first cgroup), and make sure each one works at all.
  for (int i = 0; i < 5; ++i) {
    if (motor_once(runner.socket(), i) < 0 || spawn_once(bwrap) < 0 || spawn_once(kUnshareArgv) < 0) {
      fmt::print(stderr, "bench: a warm-up run failed (motor {}, bwrap {}, unshare {})\n",
                 motor_once(runner.socket(), 99) >= 0, spawn_once(bwrap) >= 0, spawn_once(kUnshareArgv) >= 0);
      return 1;
    }
  }
  std::array<std::vector<double>, 3> us;  // motor, bwrap, unshare
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    for (int k = 0; k < 3; ++k) {
      const int which = (i + k) % 3;
      const double t = which == 0 ? motor_once(runner.socket(), 1000 + i)
                                  : spawn_once(which == 1 ? bwrap : kUnshareArgv);
      if (t > 0) {
        us[static_cast<size_t>(which)].push_back(t);
      } else {
        ++failures;
      }
    }
  }
  const double m = median(us[0]), b = median(us[1]), u = median(us[2]);
  fmt::print("sandboxed start (request or spawn call to first output byte), {} rounds, interleaved:\n", runs);
  fmt::print("  motor run /bin/echo x   median {:7.0f} us   p90 {:7.0f} us   (n={})\n", m, percentile(us[0], 0.9), us[0].size());
  fmt::print("  bwrap ... /bin/echo x   median {:7.0f} us   p90 {:7.0f} us   (n={})\n", b, percentile(us[1], 0.9), us[1].size());
  fmt::print("  unshare ... /bin/echo x median {:7.0f} us   p90 {:7.0f} us   (n={})\n", u, percentile(us[2], 0.9), us[2].size());
  fmt::print("  ratio motor / bwrap   (median): {:.2f}   (p90): {:.2f}\n", m / b, percentile(us[0], 0.9) / percentile(us[1], 0.9));
  fmt::print("  ratio motor / unshare (median): {:.2f}   (p90): {:.2f}\n", m / u, percentile(us[0], 0.9) / percentile(us[2], 0.9));
  if (failures) fmt::print("  failed runs (left out): {}\n", failures);
  fmt::print("bwrap: {}\nunshare: /usr/bin/unshare --pid --fork --mount --net --ipc --uts --cgroup /bin/echo x\n", bwrap_line);
  runner.stop();
  return failures ? 2 : 0;
}
