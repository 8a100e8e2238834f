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
// motor/bwrap and motor/unshare (medians).
//
// Then issue 20's start row, whole processes as a user runs them, interleaved: the `motor`
// client `motor --socket S run --no-sync -- true` from a directory that is no checkout, exec to
// exit, against `bwrap --ro-bind /usr /usr` + the merged-/usr links + `--dev /dev --proc /proc
// --tmpfs /tmp --unshare-all --die-with-parent --new-session --cap-drop ALL /usr/bin/true`, spawn
// to exit, on a fresh runner and on the one the rows above used (whole_process_rows). And the
// runners' own timestamps of each step of a start (bench/start_steps.hpp), including the job
// starter's (request read, sandbox planned, clone3 returned). The load average is printed with
// the figures. Run as root.
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

#include "bwrap_peer.hpp"
#include "first_output.hpp"
#include "start_steps.hpp"
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

using motor::bench::bwrap_argv;

const std::vector<std::string> kUnshareArgv = {"/usr/bin/unshare", "--pid", "--fork", "--mount", "--net", "--ipc",
                                               "--uts", "--cgroup", "/bin/echo", "x"};

// posix_spawn of args with the file actions `fa` (destroyed here); `t0` is set just before the
// call. Returns the pid, or -1.
pid_t spawn_timed(const std::vector<std::string>& args, posix_spawn_file_actions_t* fa, Clock::time_point* t0) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  *t0 = Clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(fa);
  return rc == 0 ? pid : -1;
}

// Spawns argv from `cwd` with its output to /dev/null: microseconds from the call to its exit
// (status 0), or -1.
double exit_us(const std::vector<std::string>& args, const std::string& cwd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  Clock::time_point t0;
  const pid_t pid = spawn_timed(args, &fa, &t0);
  if (pid < 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  const auto t1 = Clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// Issue 20's start row: the whole `motor` client against bwrap's /usr/bin/true, interleaved.
// Two runners take the client's jobs in the same rounds: `used` (this bench's, which has just run
// the first-output rounds, with debug logging) and `fresh` (started for this row with the config
// bench/remote.cpp's runner has, plus debug logging for the step line), so that a runner's
// history or config showing in the figure is seen beside it. Each motor sample is also filed by
// what ran just before it (bwrap, whose namespaces the kernel tears down as it exits, or a motor
// job), the other difference from bench/remote.cpp's local row, which runs between ssh sessions.
struct WholeProcessSamples {
  std::array<std::vector<double>, 3> us;  // fresh runner, used runner, bwrap
  std::array<std::vector<double>, 2> motor_after;  // any motor sample: after bwrap, after motor
  int failures = 0;
};

WholeProcessSamples whole_process_rounds(const std::array<std::vector<std::string>, 3>& argvs, const std::string& cwd,
                                         int runs) {
  WholeProcessSamples s;
  int before = -1;
  for (int i = 0; i < runs + 3; ++i) {
    for (int k = 0; k < 3; ++k) {
      const int which = (i + k) % 3;
      const double t = exit_us(argvs[static_cast<size_t>(which)], cwd);
      if (t < 0) {
        ++s.failures;
      } else if (i >= 3) {  // 3 warm-up rounds
        s.us[static_cast<size_t>(which)].push_back(t);
        if (which != 2 && before >= 0) s.motor_after[before == 2 ? 0 : 1].push_back(t);
      }
      before = which;
    }
  }
  return s;
}

int whole_process_rows(const RunnerProcess& used, const RunnerProcess& fresh, int runs) {
  const std::string outside = motor::test::make_temp_dir();  // no checkout: nothing to sync
  auto client = [](const RunnerProcess& r) {
    return std::vector<std::string>{MOTOR_CLIENT_BIN, "--socket", r.socket(), "run", "--no-sync", "--", "true"};
  };
  const std::vector<std::string> bwrap = bwrap_argv({"/usr/bin/true"});
  const WholeProcessSamples s = whole_process_rounds({client(fresh), client(used), bwrap}, outside, runs);
  const double m = median(s.us[0]), b = median(s.us[2]);
  fmt::print("whole process, exec to exit, {} rounds interleaved; load average {}", runs,
             motor::test::read_file("/proc/loadavg"));
  fmt::print("  motor run --no-sync -- true   median {:7.0f} us   p90 {:7.0f} us   (a fresh runner)\n", m,
             percentile(s.us[0], 0.9));
  fmt::print("  bwrap ... /usr/bin/true       median {:7.0f} us   p90 {:7.0f} us\n", b, percentile(s.us[2], 0.9));
  fmt::print("  ratio motor / bwrap (median): {:.2f}   (goal <= 1.0)\n", m / b);
  fmt::print("  the same on the runner of the rows above (used, debug log): median {:7.0f} us\n", median(s.us[1]));
  fmt::print("  any motor run just after bwrap: median {:7.0f} us (n={}); just after a motor run: {:7.0f} us (n={})\n",
             median(s.motor_after[0]), s.motor_after[0].size(), median(s.motor_after[1]), s.motor_after[1].size());
  if (s.failures) fmt::print("  failed runs (left out): {}\n", s.failures);
  std::string line;
  for (const auto& a : bwrap) line += (line.empty() ? "" : " ") + a;
  fmt::print("bwrap: {}\n", line);
  motor::test::remove_tree(outside);
  return s.failures;
}

// Spawns argv with stdout on a pipe: microseconds from the call to the first byte, or -1.
double spawn_once(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  Clock::time_point t0;
  const pid_t pid = spawn_timed(args, &fa, &t0);
  close(fds[1]);
  if (pid < 0) {
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
  RunnerProcess runner("max_running_jobs = 64\nlog_level = debug\n");
  if (!runner.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", runner.log());
    return 1;
  }
  const std::vector<std::string> bwrap = bwrap_argv({"/bin/echo", "x"});
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
  fmt::print("sandboxed start (request or spawn call to first output byte), {} rounds, interleaved; load average {}",
             runs, motor::test::read_file("/proc/loadavg"));
  fmt::print("  motor run /bin/echo x   median {:7.0f} us   p90 {:7.0f} us   (n={})\n", m, percentile(us[0], 0.9), us[0].size());
  fmt::print("  bwrap ... /bin/echo x   median {:7.0f} us   p90 {:7.0f} us   (n={})\n", b, percentile(us[1], 0.9), us[1].size());
  fmt::print("  unshare ... /bin/echo x median {:7.0f} us   p90 {:7.0f} us   (n={})\n", u, percentile(us[2], 0.9), us[2].size());
  fmt::print("  ratio motor / bwrap   (median): {:.2f}   (p90): {:.2f}\n", m / b, percentile(us[0], 0.9) / percentile(us[1], 0.9));
  fmt::print("  ratio motor / unshare (median): {:.2f}   (p90): {:.2f}\n", m / u, percentile(us[0], 0.9) / percentile(us[2], 0.9));
  if (failures) fmt::print("  failed runs (left out): {}\n", failures);
  fmt::print("bwrap: {}\nunshare: /usr/bin/unshare --pid --fork --mount --net --ipc --uts --cgroup /bin/echo x\n", bwrap_line);
  motor::bench::print_start_steps(runner.log(), "the first-output rows' jobs");
  RunnerProcess fresh("log_level = debug\n");
  if (!fresh.start()) {
    fmt::print(stderr, "bench: the second runner did not start:\n{}\n", fresh.log());
    return 1;
  }
  const size_t used_log_before = runner.log().size();
  failures += whole_process_rows(runner, fresh, runs);
  motor::bench::print_start_steps(fresh.log(), "the whole-process row's jobs, fresh runner");
  motor::bench::print_start_steps(runner.log().substr(used_log_before), "the whole-process row's jobs, used runner");
  fresh.stop();
  runner.stop();
  return failures ? 2 : 0;
}
