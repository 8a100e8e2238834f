// Job start latency and the loop's worst stall, as ratios against a baseline measured in the
// same run (bench/README.md).
//
//  1. Start latency: request sent to the first output byte of `/bin/echo x`, through a real
//     runner (one client, one job at a time), against posix_spawn of the same command with a
//     pipe, from the call to the first byte. Medians of N runs each, interleaved.
//  2. Loop stall: 20 clients each submit a job at the same moment; the runner's own meter
//     (runner.status loop_worst_stall_us) reports the longest time one loop iteration spent
//     running callbacks, compared with one job's median start latency.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "first_output.hpp"
#include "stall_burst.hpp"
#include "stats.hpp"
#include "support/runner_harness.hpp"

extern char** environ;

namespace {

using motor::bench::median;
constexpr auto motor_once = motor::bench::first_output_us;
using motor::bench::percentile;
using Clock = std::chrono::steady_clock;
using motor::test::RunnerProcess;

// posix_spawn of /bin/echo x: microseconds from the call to the first byte on the pipe.
double spawn_once() {
  int fds[2];
  if (pipe(fds) < 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char* argv[] = {const_cast<char*>("/bin/echo"), const_cast<char*>("x"), nullptr};
  const auto t0 = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, "/bin/echo", &fa, nullptr, argv, environ) != 0) return -1;
  close(fds[1]);
  char c;
  const ssize_t n = read(fds[0], &c, 1);
  const auto t1 = Clock::now();
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  posix_spawn_file_actions_destroy(&fa);
  return n == 1 ? std::chrono::duration<double, std::micro>(t1 - t0).count() : -1;
}


}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 200;
  if (geteuid() != 0) {
    fmt::print(stderr, "bench: run as root (the runner creates cgroups and switches accounts)\n");
    return 1;
  }
  RunnerProcess runner("max_running_jobs = 64\n");
  if (!runner.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", runner.log());
    return 1;
  }
  // Warm up both paths (page cache, first cgroup creation).
  for (int i = 0; i < 5; ++i) {
    spawn_once();
    motor_once(runner.socket(), i);
  }
  std::vector<double> spawn_us, motor_us;
  for (int i = 0; i < runs; ++i) {
    const double s = spawn_once();
    const double m = motor_once(runner.socket(), i);
    if (s > 0) spawn_us.push_back(s);
    if (m > 0) motor_us.push_back(m);
  }
  const double spawn_median = median(spawn_us), motor_median = median(motor_us);
  fmt::print("start latency (request to first output byte), {} runs each, interleaved:\n", runs);
  fmt::print("  posix_spawn /bin/echo  median {:8.0f} us   p90 {:8.0f} us\n", spawn_median, percentile(spawn_us, 0.9));
  fmt::print("  motor run /bin/echo    median {:8.0f} us   p90 {:8.0f} us\n", motor_median, percentile(motor_us, 0.9));
  fmt::print("  ratio motor / posix_spawn (median): {:.1f}\n", motor_median / spawn_median);

  // The loop's worst stall while 20 jobs start at once.
  std::vector<double> stalls;
  for (int round = 0; round < 5; ++round) {
    const double stall = motor::bench::worst_stall_of_burst(runner.socket());
    if (stall >= 0) stalls.push_back(stall);
  }
  const double stall_median = median(stalls);
  fmt::print("loop worst stall while 20 jobs start at once, 5 rounds:\n");
  fmt::print("  median of the rounds' worst stalls {:8.0f} us   max {:8.0f} us\n", stall_median,
             *std::max_element(stalls.begin(), stalls.end()));
  fmt::print("  ratio worst stall / one job's median start latency: {:.2f}\n", stall_median / motor_median);
  // What the runner itself measured as slow on its loop (SlowCall), for the report.
  motor::bench::print_slow_calls(runner.log(), "one runner");
  runner.stop();
  return 0;
}
