// Workspace prepare (issue 7) against its peers, measured in the same run (bench/README.md).
//
//  1. First prepare of a 10,000-file checkout into a new workspace (fresh client cache, fresh
//     runner mirror, empty workspace), end to end through `motor workspace prepare`, against
//     `git clone --no-local` of the same repository and `rsync -a` of the same tree (no .git)
//     into an empty directory.
//  2. Incremental prepare after a one-line edit of one file, against `rsync -a` of the whole
//     tree onto an up-to-date copy after the same edit. Goal: within 2x of rsync.
//  3. The changed-paths scan after a job, with 100,000 files in the workspace's (ignored)
//     target/: `motor run --no-sync -c true` end to end, against the same with no target/.
// Medians of N runs each, interleaved (argv[1], default 5); argv[2] "first" runs only row 1. The
// first prepare's time is split by the runner's own figures in its reply (fetch: index-pack of
// the bundle; checkout: the sandboxed read-tree into the workspace); the rest is the client's
// git work, the transfer and the process starts. Run as root (it starts a runner).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runner_bench.hpp"
#include "stats.hpp"
#include "support/runner_harness.hpp"

namespace {

using motor::bench::median;
using motor::test::CommandResult;
using motor::test::RunnerProcess;
using Clock = std::chrono::steady_clock;

bool g_runs_failed = false;

double timed_ms(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}, const std::string& cwd = "",
                CommandResult* out = nullptr) {
  const auto t0 = Clock::now();
  auto r = motor::test::run_program(argv, env, std::chrono::seconds(600), cwd);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (out) *out = r;
  if (r.exit_code != 0) {
    // A failed run's time is no figure: a missing peer (rsync: bench/setup installs it) would
    // otherwise make its ratio look like anything. Its rows print nan, and main fails.
    fmt::print(stderr, "failed ({}): {} {}\n", r.exit_code, argv[0], r.err);
    g_runs_failed = true;
    return std::nan("");
  }
  return ms;
}

void sh(const std::string& script, const std::string& cwd = "/") {
  auto r = motor::test::run_program({"/bin/sh", "-ec", script}, {}, std::chrono::seconds(600), cwd);
  if (r.exit_code != 0) fmt::print(stderr, "setup failed: {}\n{}\n", script, r.err);
}

// `motor --socket S ARGS` from the checkout, with its own client cache: the time of the whole process.
struct MotorCli {
  const RunnerProcess& runner;
  std::string repo;
  double operator()(const std::vector<std::string>& args, const std::string& cache, CommandResult* out = nullptr) const {
    std::vector<std::string> a{MOTOR_CLIENT_BIN, "--socket", runner.socket()};
    a.insert(a.end(), args.begin(), args.end());
    return timed_ms(a, {"XDG_CACHE_HOME=" + cache}, repo, out);
  }
};

// 100 directories of 100 files of ~300 bytes, committed, and a .gitignore naming target/.
void make_checkout(const std::string& repo) {
  sh(fmt::format("git init -q {0} && cd {0} && git config user.name b && git config user.email b@b && "
                 "printf 'target/\\n' > .gitignore && for d in $(seq 1 100); do mkdir d$d; for f in $(seq 1 100); do "
                 "printf 'directory %s file %s %0280d\\n' $d $f 0 > d$d/f$f.txt; done; done && git add -A && "
                 "git commit -qm tree",
                 repo));
}

// Row 1: a fresh client cache, mirror and workspace each round, beside git clone and rsync.
// Fair to all three on this host's ext4 (no journal: its inode allocator skips inodes deleted in
// the last ~30 s, so creating 10,000 files right after deleting 10,000 costs several times more):
// nothing is deleted until the last round is over, and each round starts with the next of the
// three in turn, so none always follows the same one.
void first_prepare_row(const MotorCli& motor, const std::string& base, int n) {
  std::vector<double> first_motor, first_clone, first_rsync, first_fetch, first_checkout;
  // Round i's workspace key and client cache: prepared in the round, dropped after the last.
  auto key = [](int i) { return fmt::format("first{}", i); };
  auto cache = [&](int i) { return fmt::format("{}/cache-first-{}", base, i); };
  for (int i = 0; i < n; ++i) {
    for (int turn = 0; turn < 3; ++turn) {
      switch ((i + turn) % 3) {
        case 0: {
          sh(fmt::format("rm -rf {}/mirrors/root", motor.runner.state_dir()));  // a bare directory: cheap
          CommandResult r;
          first_motor.push_back(motor({"workspace", "prepare", "-w", key(i)}, cache(i), &r));
          // "... (runner: fetch N ms, checkout M ms)"
          if (auto at = r.out.find("fetch "); at != std::string::npos) first_fetch.push_back(std::atof(r.out.c_str() + at + 6));
          if (auto at = r.out.find("checkout "); at != std::string::npos) {
            first_checkout.push_back(std::atof(r.out.c_str() + at + 9));
          }
          break;
        }
        case 1:
          first_clone.push_back(
              timed_ms({"/usr/bin/git", "clone", "-q", "--no-local", motor.repo, fmt::format("{}/clone{}", base, i)}));
          break;
        default:
          first_rsync.push_back(
              timed_ms({"/usr/bin/rsync", "-a", "--exclude=.git", motor.repo + "/", fmt::format("{}/rsync{}/", base, i)}));
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    motor({"workspace", "drop", key(i)}, cache(i));
    sh(fmt::format("rm -rf {0}/clone{1} {0}/rsync{1}", base, i));
  }
  fmt::print("workspace prepare, 10,000 files, medians of {} runs (ms); load average {}", n,
             motor::test::read_file("/proc/loadavg"));
  fmt::print("  first:       motor {:8.1f}   git clone --no-local {:8.1f}   rsync -a {:8.1f}   motor/rsync {:.2f}x (goal <= 2x)\n",
             median(first_motor), median(first_clone), median(first_rsync), median(first_motor) / median(first_rsync));
  fmt::print("               of which the runner's fetch {:.1f} and checkout {:.1f}\n", median(first_fetch),
             median(first_checkout));
}

// Row 2: one workspace and one rsync copy, both up to date; then edit, sync, repeat.
void incremental_row(const MotorCli& motor, const std::string& base, int n) {
  const std::string cache = base + "/cache-incremental";
  const std::string copy = base + "/copy/";
  motor({"workspace", "prepare", "-w", "inc"}, cache);
  timed_ms({"/usr/bin/rsync", "-a", "--exclude=.git", motor.repo + "/", copy});
  std::vector<double> inc_motor, inc_rsync;
  int64_t inc_bytes = 0;
  for (int i = 0; i < n; ++i) {
    sh(fmt::format("echo edit {} >> d50/f50.txt", i), motor.repo);
    CommandResult r;
    inc_motor.push_back(motor({"workspace", "prepare", "-w", "inc"}, cache, &r));
    if (auto at = r.out.find(", "); at != std::string::npos) inc_bytes = std::atoll(r.out.c_str() + at + 2);
    inc_rsync.push_back(timed_ms({"/usr/bin/rsync", "-a", "--exclude=.git", motor.repo + "/", copy}));
  }
  fmt::print("  incremental: motor {:8.1f}   rsync -a (whole tree) {:8.1f}   motor/rsync {:.2f}x (goal <= 2x); "
             "bundle {} bytes\n",
             median(inc_motor), median(inc_rsync), median(inc_motor) / median(inc_rsync), inc_bytes);
}

// Row 3: a job in a workspace with and without 100,000 files in target/.
void scan_row(const MotorCli& motor, const std::string& base, int n) {
  const std::string cache = base + "/cache-incremental";
  motor({"workspace", "prepare", "-w", "scan-big"}, cache);
  motor({"workspace", "prepare", "-w", "scan-small"}, cache);
  const std::string big = motor.runner.workspace("scan-big");
  sh(fmt::format("mkdir -p {0}/target && cd {0}/target && for d in $(seq 1 100); do mkdir d$d; (cd d$d && "
                 "seq 1 1000 | sed 's/$/.o/' | xargs touch); done && chown -R motor-job:motor-job {0}/target",
                 big));
  std::vector<double> scan_big, scan_small;
  for (int i = 0; i < n; ++i) {
    scan_big.push_back(motor({"run", "--no-sync", "-w", "scan-big", "-c", "true"}, cache));
    scan_small.push_back(motor({"run", "--no-sync", "-w", "scan-small", "-c", "true"}, cache));
  }
  fmt::print("  job + scan:  100,000-file target/ {:8.1f}   no target/ {:8.1f}   difference {:.1f} ms\n", median(scan_big),
             median(scan_small), median(scan_big) - median(scan_small));
}

}  // namespace

int main(int argc, char** argv) {
  const auto rounds = motor::bench::rounds_to_run(argc, argv, 5);
  if (!rounds) return 1;
  const int n = *rounds;
  const bool only_first = argc > 2 && std::strcmp(argv[2], "first") == 0;
  const std::string base = motor::test::make_temp_dir();
  const std::string repo = base + "/repo";
  make_checkout(repo);
  RunnerProcess runner;
  if (!motor::bench::start_runner(runner)) return 1;
  const MotorCli motor{runner, repo};
  first_prepare_row(motor, base, n);
  if (!only_first) {
    incremental_row(motor, base, n);
    scan_row(motor, base, n);
  }
  runner.stop();
  motor::test::remove_tree(base);
  if (g_runs_failed) {
    fmt::print(stderr, "some runs failed: the rows with nan have no figure (bench/setup installs the peers)\n");
    return 1;
  }
  return 0;
}
