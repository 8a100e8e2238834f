// The no-change run (issue 20, first row): `motor run -- true` inside an unchanged, already
// synced 10,000-file checkout against `motor run --no-sync -- true` from the same directory, the
// whole client process each time, interleaved, medians of N rounds (bench/README.md). The synced
// run decides "unchanged" from the checkout's fingerprint (src/client/checkout_fingerprint.hpp):
// no git process, and the runner answers the prepare of an untouched workspace without a checkout.
// With the checkout's watcher (src/client/checkout_watch.hpp) the client looks at no file of the
// checkout either; the row "no watcher" is the fingerprint's stat check alone.
// Run as root (it starts a runner).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "stats.hpp"
#include "support/runner_harness.hpp"

namespace {

using motor::bench::median;
using motor::test::CommandResult;
using Clock = std::chrono::steady_clock;

double timed_ms(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd) {
  const auto t0 = Clock::now();
  auto r = motor::test::run_program(argv, env, std::chrono::seconds(600), cwd);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (r.exit_code != 0) fmt::print(stderr, "failed ({}): {} {}\n", r.exit_code, argv.back(), r.err);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    fmt::print(stderr, "run as root: the benchmark starts a runner\n");
    return 1;
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string base = motor::test::make_temp_dir();
  const std::string repo = base + "/repo";
  // 100 directories of 100 files of ~300 bytes, committed (as bench/workspace_prepare.cpp).
  auto setup = motor::test::run_program(
      {"/bin/sh", "-ec",
       fmt::format("git init -q {0} && cd {0} && git config user.name b && git config user.email b@b && "
                   "printf 'target/\\n' > .gitignore && for d in $(seq 1 100); do mkdir d$d; for f in $(seq 1 100); do "
                   "printf 'directory %s file %s %0280d\\n' $d $f 0 > d$d/f$f.txt; done; done && git add -A && "
                   "git commit -qm tree",
                   repo)},
      {}, std::chrono::seconds(600));
  if (setup.exit_code != 0) {
    fmt::print(stderr, "setup failed: {}\n", setup.err);
    return 1;
  }
  motor::test::RunnerProcess runner("log_level = debug\n");  // the scan's timing lines
  if (!runner.start()) {
    fmt::print(stderr, "runner did not start:\n{}\n", runner.log());
    return 1;
  }
  const std::vector<std::string> env = {"XDG_CACHE_HOME=" + base + "/cache"};
  const std::string client = MOTOR_CLIENT_BIN;
  auto motor = [&](std::vector<std::string> args, std::vector<std::string> extra_env = {}) {
    std::vector<std::string> a{client, "--socket", runner.socket()};
    a.insert(a.end(), args.begin(), args.end());
    extra_env.insert(extra_env.end(), env.begin(), env.end());
    return timed_ms(a, extra_env, repo);
  };
  // The first sync (a full one), then two more: the fingerprint is kept once the files are older
  // than a sync's clock reading, and names the watcher's answer once the watcher (started by the
  // first) has walked the tree.
  const double first = motor({"run", "-w", "nc", "--", "true"});
  for (int i = 0; i < 2; ++i) {
    usleep(300 * 1000);
    motor({"run", "-w", "nc", "--", "true"});
  }
  // synced: the fast path. full: the same with the fingerprint refused (a GIT_* variable it does
  // not know: the client runs git as before this change). same_key: --no-sync in the synced
  // workspace (the runner's changed-path scan after the job, which every synced run also pays).
  // no_sync: --no-sync in a workspace never prepared (no scan): the baseline.
  std::vector<double> synced, unwatched, full, same_key, no_sync;
  for (int i = 0; i < n; ++i) {
    synced.push_back(motor({"run", "-w", "nc", "--", "true"}));
    unwatched.push_back(motor({"run", "-w", "nc", "--", "true"}, {"MOTOR_CHECKOUT_WATCH=0"}));
    full.push_back(motor({"run", "-w", "nc", "--", "true"}, {"GIT_CONFIG_NOSYSTEM=1"}));
    same_key.push_back(motor({"run", "--no-sync", "-w", "nc", "--", "true"}));
    no_sync.push_back(motor({"run", "--no-sync", "--", "true"}));
  }
  const double s = median(synced), u = median(unwatched), f = median(full), k = median(same_key), b = median(no_sync);
  fmt::print("no-change run, 10,000 files, {} rounds interleaved (first sync {:.1f} ms)\n", n, first);
  fmt::print("  motor run -- true (fingerprint, watcher)  median {:7.1f} ms\n", s);
  fmt::print("  motor run -- true (no watcher: stat check) median {:6.1f} ms\n", u);
  fmt::print("  motor run -- true (fingerprint refused)   median {:7.1f} ms\n", f);
  fmt::print("  motor run --no-sync -w <same key> -- true median {:7.1f} ms\n", k);
  fmt::print("  motor run --no-sync -- true               median {:7.1f} ms\n", b);
  fmt::print("  ratio vs --no-sync {:.2f} (goal <= 1.15; no watcher {:.2f}; full sync {:.2f}); vs --no-sync in the same workspace {:.2f}\n",
             s / b, u / b, f / b, s / k);
  // Where the runner's scans went (its debug log): answered from the baseline after a stat walk, or
  // the full scan (the sandbox helper's git status), microseconds each.
  std::vector<double> walks, fulls, feeds;
  const std::string log = runner.log();
  for (size_t at = 0; (at = log.find("workspace ", at)) != std::string::npos; ++at) {
    const size_t eol = log.find('\n', at);
    const std::string line = log.substr(at, eol - at);
    const auto us = [&](const char* after) {
      const size_t p = line.find(after);
      return p == std::string::npos ? -1.0 : std::atof(line.c_str() + p + std::strlen(after));
    };
    if (line.find("change feed heard of nothing") != std::string::npos) feeds.push_back(us("), in "));
    else if (line.find("answered from its baseline") != std::string::npos) walks.push_back(us("walked in "));
    else if (line.find("full scan") != std::string::npos) fulls.push_back(us(") in "));
  }
  fmt::print("  runner's scans: {} answered from the baseline by the change feed (median {:.0f} us), {} after a stat walk "
             "(median {:.0f} us), {} in full (median {:.0f} us)\n",
             feeds.size(), feeds.empty() ? 0.0 : median(feeds), walks.size(), walks.empty() ? 0.0 : median(walks),
             fulls.size(), fulls.empty() ? 0.0 : median(fulls));
  motor::test::remove_tree(base);
  return 0;
}
