// Warm workspaces (issue 21, docs/compile-cache.md): the first `cargo build` in a NEW workspace of
// a real multi-crate Rust project (test/fixtures/rust-workspace: serde, serde_derive, regex, log
// from Debian's vendored crates, offline) with the repository's published warm target, against a
// cold new workspace (a repository with nothing published) and against the caller building
// locally with a warm target of its own (same tree, same toolchain: Debian's /usr/bin/cargo,
// outside Motor). The whole client process each time (`motor run -w <new key> -- cargo build`,
// its sync and prepare included; `cargo build` for the local peer), interleaved, medians of N
// rounds. A second row: the same after an edit to warm-core (each round's edit is new), warm new
// workspace against the local warm build. Goal: within 1.2x of the local warm build.
// Like with like: each `motor run` asks for as many CPUs as the local cargo uses (`--cpus`, every
// CPU this process may run on: cargo's default -j). Before session 16 the jobs had the runner's
// default_cpus (1) against the local build's 2, which the edited row's rustc felt.
// Spares (docs/compile-cache.md "Spares made ahead"): the runner copies the warm target ahead,
// while it is quiet, and a new workspace takes that copy whole. Before each warm new workspace
// the bench waits (at most 30 s) until a spare is ready, as an agent's next task finds one when
// its host had a quiet second since the last new workspace; the copy itself is then not on any
// measured path, and none runs beside a measured run. It prints how many warm runs took one, and
// the copy's own time from the runner's log. MOTOR_BENCH_WARM_SPARES=0: the runner copies on the
// prepare's path instead (warm_spares = false), as before session 22.
// Run as root (it starts a runner).
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runner_bench.hpp"
#include "stats.hpp"

namespace {

using motor::bench::median;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kToolchainPath = {"PATH=/usr/bin:/bin"};  // Debian's cargo, as jobs see it

double timed_ms(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd) {
  const auto t0 = Clock::now();
  auto r = motor::test::run_program(argv, env, std::chrono::seconds(900), cwd);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (r.exit_code != 0) fmt::print(stderr, "failed ({}): {}\n{}\n{}\n", r.exit_code, argv.back(), r.out, r.err);
  return ms;
}

bool shell(const std::string& cwd, const std::string& script) {
  auto r = motor::test::run_program({"/bin/sh", "-ec", script}, kToolchainPath, std::chrono::seconds(900), cwd);
  if (r.exit_code != 0) fmt::print(stderr, "setup failed: {}\n{}\n", script, r.err);
  return r.exit_code == 0;
}

// Polls exec.status until the runner's one repository has a rebuild result other than building.
std::string wait_for_fill(const motor::test::RunnerProcess& runner) {
  for (int i = 0; i < 1800; ++i) {
    motor::test::RawClient c(runner.socket());
    const auto s = motor::test::json_field(motor::test::call_method(c, 1, "exec.status", "{}"),
                                           "/result/repositories/0/last_rebuild_result");
    if (s != "building" && s != "null" && !s.empty()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return "timeout";
}

// A counter of the runner's metrics (0 when absent).
long metric(const motor::test::RunnerProcess& runner, const std::string& sample) {
  motor::test::RawClient c(runner.socket());
  const std::string m = motor::test::json_field(motor::test::call_method(c, 2, "runner.status", R"({"metrics":true})"),
                                                "/result/metrics");
  const auto at = m.find(sample + " ");
  return at == std::string::npos ? 0 : std::atol(m.c_str() + at + sample.size() + 1);
}

// Waits until more spares were made than taken (one is ready), at most 30 s.
void wait_for_spare(const motor::test::RunnerProcess& runner) {
  for (int i = 0; i < 300; ++i) {
    if (metric(runner, R"(motor_cache_warm_spares_total{event="made"})") >
        metric(runner, R"(motor_cache_warm_spares_total{event="taken"})")) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The copy times the runner logged ("a warm spare of ... made in N ms").
std::vector<double> spare_copy_ms(const std::string& log) {
  std::vector<double> ms;
  static const std::regex made("a warm spare of .* made in ([0-9]+) ms");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), made); it != std::sregex_iterator(); ++it) {
    ms.push_back(std::stod((*it)[1].str()));
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const auto rounds = motor::bench::rounds_to_run(argc, argv, 3);
  if (!rounds) return 1;
  const std::string base = motor::test::make_temp_dir();
  // The project pushed to a bare origin: `warm` is a clone whose main the origin confirms (its
  // fill publishes the warm target); `cold` is a clone one empty commit ahead (same tree, no tip,
  // so nothing is ever published for it); `local` is the caller's own checkout.
  if (!shell(base, fmt::format("{} && git checkout -qb main && cp -a {}/test/fixtures/rust-workspace/. . && git add -A && "
                               "git commit -qm rust && cd .. && git clone -q --bare seed origin.git && "
                               "for c in warm cold local; do git clone -q file://$PWD/origin.git $c; done && "
                               "git -C cold -c user.name=b -c user.email=b@b commit -q --allow-empty -m ahead && "
                               "cd local && cargo build -q",
                               motor::test::git_init_script("seed"), MOTOR_SOURCE_DIR))) {
    return 1;
  }
  const char* spares_env = std::getenv("MOTOR_BENCH_WARM_SPARES");
  const bool spares = !(spares_env && std::string(spares_env) == "0");
  motor::test::RunnerProcess runner(std::string("cache_fill_command = cargo build\n") +
                                    (spares ? "" : "warm_spares = false\n"));
  if (!motor::bench::start_runner(runner)) return 1;
  const std::vector<std::string> env = {"XDG_CACHE_HOME=" + base + "/client-cache"};
  cpu_set_t usable;
  const int cpus = sched_getaffinity(0, sizeof usable, &usable) == 0 ? CPU_COUNT(&usable) : 1;
  auto motor_run = [&](const std::string& clone, const std::string& key, const std::string& command) {
    return timed_ms({MOTOR_CLIENT_BIN, "--socket", runner.socket(), "run", "-w", key, "--cpus", std::to_string(cpus),
                     "-c", command},
                    env, base + "/" + clone);
  };
  auto motor_build = [&](const std::string& clone, const std::string& key) { return motor_run(clone, key, "cargo build"); };
  auto local_build = [&] { return timed_ms({"/usr/bin/cargo", "build"}, kToolchainPath, base + "/local"); };
  const double fill_start = motor_run("warm", "first", "true");
  const auto t0 = Clock::now();
  const std::string fill = wait_for_fill(runner);
  const double fill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (fill != "ok") {
    fmt::print(stderr, "the fill ended {}:\n{}\n", fill, runner.log());
    return 1;
  }
  // Where the time of a warm new workspace goes: `true` in a new workspace with the copy and
  // without (the cold repository's).
  std::vector<double> warm, cold, local, warm_edit, local_edit, true_warm, true_cold;
  auto edit = [](int round) { return fmt::format("printf '// round {}\\n' >> crates/warm-core/src/lib.rs", round); };
  auto spare_ready = [&] {
    if (spares) wait_for_spare(runner);
  };
  for (int i = 0; i < *rounds; ++i) {
    spare_ready();
    true_warm.push_back(motor_run("warm", fmt::format("true-warm-{}", i), "true"));
    true_cold.push_back(motor_run("cold", fmt::format("true-cold-{}", i), "true"));
    spare_ready();
    warm.push_back(motor_build("warm", fmt::format("warm-{}", i)));
    cold.push_back(motor_build("cold", fmt::format("cold-{}", i)));
    local.push_back(local_build());
    if (!shell(base + "/warm", edit(i)) || !shell(base + "/local", edit(i))) return 1;
    spare_ready();
    warm_edit.push_back(motor_build("warm", fmt::format("warm-edit-{}", i)));
    local_edit.push_back(local_build());
    if (!shell(base + "/warm", "git checkout -q -- .") || !shell(base + "/local", "git checkout -q -- .")) return 1;
    local_build();  // the local target warm for the unedited tree again (not measured)
  }
  const double w = median(warm), c = median(cold), l = median(local), we = median(warm_edit), le = median(local_edit);
  fmt::print("warm workspaces, test/fixtures/rust-workspace, {} rounds interleaved (fill: {:.0f} s after a {:.0f} ms run); "
             "jobs and local cargo on {} CPUs; load average {}",
             *rounds, fill_s, fill_start, cpus, motor::test::read_file("/proc/loadavg"));
  fmt::print("  same tree: new workspace, published warm target  median {:8.0f} ms\n", w);
  fmt::print("  same tree: new workspace, cold                   median {:8.0f} ms\n", c);
  fmt::print("  same tree: local cargo build, warm target        median {:8.0f} ms\n", l);
  fmt::print("  one crate edited: new workspace, warm target     median {:8.0f} ms\n", we);
  fmt::print("  one crate edited: local cargo build, warm target median {:8.0f} ms\n", le);
  fmt::print("  motor run -- true, new workspace: warm {:.0f} ms, cold (no target) {:.0f} ms (median)\n",
             median(true_warm), median(true_cold));
  const auto copies = spare_copy_ms(runner.log());
  fmt::print("  warm spares: {} of {} warm new workspaces took one; {} made, the copy median {:.0f} ms (off the measured paths)\n",
             metric(runner, R"(motor_cache_warm_spares_total{event="taken"})"), 3 * *rounds, copies.size(),
             copies.empty() ? 0.0 : median(copies));
  fmt::print("  ratio warm/local {:.2f} (goal <= 1.2), edited {:.2f}; cold/warm {:.1f}\n", w / l, we / le, c / w);
  motor::test::remove_tree(base);
  return 0;
}
