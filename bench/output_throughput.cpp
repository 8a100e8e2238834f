// Issue 20's output row: 256 MiB of a job's stdout reaching the caller, against the same bytes
// from bwrap into a pipe. Whole processes, spawn to exit with every byte read, interleaved,
// medians of N rounds (argv[1], default 5; argv[2]: MiB per run, default 256).
//
//  motor  `motor --socket S run --no-sync -- dd if=/dev/zero bs=1M count=N`, its stdout a pipe this
//         benchmark drains: the job's pipe, the runner's log, the output records (base64 in
//         JSON frames), the client's decoding and its writes.
//  bwrap  `bwrap` with the flags of the start row (bench/sandbox_start.cpp) running the same
//         `dd`, its stdout the same kind of pipe.
//
// Prints MiB/s for each and the ratio motor / bwrap (goal >= 0.25), with the load average. The
// bytes are checked: each run must deliver exactly N bytes, all zero. Run as root.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bwrap_peer.hpp"
#include "runner_bench.hpp"
#include "stats.hpp"
#include "support/runner_harness.hpp"

extern char** environ;

namespace {

using motor::bench::median;
using Clock = std::chrono::steady_clock;

using motor::bench::bwrap_argv;

// Spawns args with stdout on a pipe this process drains, from `cwd`: seconds from the call to its
// exit with every byte read, or -1 (a failed exit, or not exactly `expected` zero bytes).
double drained_seconds(const std::vector<std::string>& args, const std::string& cwd, uint64_t expected) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
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
  std::vector<char> buf(1 << 20);
  static const std::vector<char> zeros(1 << 20, 0);
  uint64_t got = 0;
  bool all_zero = true;
  for (;;) {
    const ssize_t n = read(fds[0], buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (all_zero) all_zero = std::memcmp(buf.data(), zeros.data(), static_cast<size_t>(n)) == 0;
    got += static_cast<uint64_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != expected || !all_zero) {
    fmt::print(stderr, "bench: {} exit {} delivered {} of {} bytes{}\n", args[0], status, got, expected,
               all_zero ? "" : " (not all zero)");
    return -1;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const auto rounds = motor::bench::rounds_to_run(argc, argv, 5);
  if (!rounds) return 1;
  const int runs = *rounds;
  const uint64_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  const uint64_t bytes = mib << 20;
  // The job's whole output fits the log: a follower that falls behind is never cut short.
  motor::test::RunnerProcess runner(fmt::format("job_log_max_size = {}M\n", mib * 2 + 64));
  if (!motor::bench::start_runner(runner)) return 1;
  const std::string outside = motor::test::make_temp_dir();  // no checkout: nothing to sync
  // 1 MiB writes: the peer is bounded by the pipe, not by its writer's block size.
  const std::vector<std::string> job = {"/usr/bin/dd", "if=/dev/zero", "bs=1M", "count=" + std::to_string(mib), "status=none"};
  std::vector<std::string> client{MOTOR_CLIENT_BIN, "--socket", runner.socket(), "run", "--no-sync", "--"};
  client.insert(client.end(), job.begin(), job.end());
  const std::vector<std::string> bwrap = bwrap_argv(job);
  std::array<std::vector<double>, 2> seconds;
  int failures = 0;
  for (int i = 0; i < runs + 1; ++i) {
    for (int k = 0; k < 2; ++k) {
      const int which = (i + k) % 2;
      const double s = drained_seconds(which == 0 ? client : bwrap, outside, bytes);
      if (s < 0) ++failures;
      else if (i >= 1) seconds[static_cast<size_t>(which)].push_back(s);  // 1 warm-up round
    }
  }
  const double m = static_cast<double>(mib) / median(seconds[0]), b = static_cast<double>(mib) / median(seconds[1]);
  fmt::print("job stdout to the caller's pipe, {} MiB, {} rounds interleaved; load average {}", mib, runs,
             motor::test::read_file("/proc/loadavg"));
  fmt::print("  motor run --no-sync -- dd if=/dev/zero bs=1M count={}   median {:8.1f} MiB/s ({:.3f} s)\n", mib, m,
             median(seconds[0]));
  fmt::print("  bwrap ... dd if=/dev/zero bs=1M count={}                median {:8.1f} MiB/s ({:.3f} s)\n", mib, b,
             median(seconds[1]));
  fmt::print("  ratio motor / bwrap (median MiB/s): {:.3f}   (goal >= 0.25)\n", m / b);
  if (failures) fmt::print("  failed runs (left out): {}\n", failures);
  motor::test::remove_tree(outside);
  return failures ? 1 : 0;
}
