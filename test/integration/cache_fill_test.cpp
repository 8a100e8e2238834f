// Compile-cache fills through a real runner and the real `motor` (docs/compile-cache.md): a run
// from a checkout whose default-branch tip its origin (a local bare repository over file://)
// confirms starts one fill job as motor-cache, shown in exec.status as `base:<root>` while it
// builds, then `ok` with the published commit; an unverified tip runs and prepares with no fill;
// a new workspace starts from the published warm target, so its first `cargo build` (Debian's
// cargo, offline: test/fixtures/rust-workspace) has nothing to compile; a build script and a
// proc-macro that write the shared cache and CARGO_HOME change nothing shared.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

uid_t uid_of(const char* name) {
  const passwd* pw = getpwnam(name);
  return pw ? pw->pw_uid : 0;
}

class CacheFill : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    MOTOR_REQUIRE(uid_of("motor-cache") != 0 && uid_of("motor-job") != 0, "scripts/setup creates motor-cache and motor-job");
    base_ = make_temp_dir();
    shared_ = base_ + "/shared-cache";
    sh(base_, "mkdir shared-cache && chown motor-cache: shared-cache && echo kept > shared-cache/entry && "
              "chown motor-cache: shared-cache/entry && " + git_init_script("seed") +
              " && git checkout -qb main && echo 'all:' > Makefile && git add Makefile && git commit -qm a"
              " && cd .. && git clone -q --bare seed origin.git && git clone -q file://$PWD/origin.git clone"
              " && git -C clone config user.name t && git -C clone config user.email t@t");
    clone_ = base_ + "/clone";
    env_ = {"XDG_CACHE_HOME=" + base_ + "/client-cache"};
  }
  void TearDown() override {
    runner_.reset();
    remove_tree(base_);
  }
  void start_runner(const std::string& fill_command, const std::string& more_config = "") {
    runner_ = std::make_unique<RunnerProcess>("cache_paths = " + shared_ + "\ncache_fill_command = " + fill_command + "\n" +
                                              more_config);
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  CommandResult run_in_clone(const std::string& command) {
    return runner_->client_in(clone_, {"run", "-c", command}, env_);
  }
  std::string status() {
    RawClient c(runner_->socket());
    return call_method(c, 1, "exec.status", "{}");
  }
  // Polls exec.status until the first repository's last_rebuild_result is not "building"; notes
  // whether the fill was seen running as `base:<root>`. 240 s: the Rust fixture's cold fill takes
  // about a minute on an idle 2-core host, and CI builds beside the tests.
  std::string wait_for_fill_end(bool* seen_running) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
    std::string s;
    while (std::chrono::steady_clock::now() < deadline) {
      s = status();
      if (json_field(s, "/result/running_jobs/0/workspace_key") == "base:" + clone_) *seen_running = true;
      const auto result = json_field(s, "/result/repositories/0/last_rebuild_result");
      if (result != "building") return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return s;
  }
  // Replaces the clone's tree with a fixture of test/fixtures/ and pushes it: the verified tip.
  void push_fixture(const std::string& name) {
    sh(clone_, fmt::format("git rm -q Makefile && cp -a {}/test/fixtures/{}/. . && git add -A && git commit -qm {} && "
                           "git push -q origin main", MOTOR_SOURCE_DIR, name, name));
  }
  CommandResult run_in_workspace(const std::string& key, const std::string& command) {
    return runner_->client_in(clone_, {"run", "-w", key, "-c", command}, env_, std::chrono::seconds(280));
  }
  std::string metrics() {
    RawClient c(runner_->socket());
    return json_field(call_method(c, 2, "runner.status", R"({"metrics":true})"), "/result/metrics");
  }
  // Polls the metrics until they hold `line` (a sample and its value).
  bool wait_for_metric(const std::string& line) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      if (metrics().find(line + "\n") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // A new workspace of the published tree: its target/ is its own, and nothing is compiled.
  void expect_warm_first_build(const std::string& key) {
    auto warm = run_in_workspace(key, "stat -c %U target/debug/warm-app && cargo build -v 2>&1 && target/debug/warm-app");
    ASSERT_EQ(warm.exit_code, 0) << warm.out << warm.err << runner_->log();
    EXPECT_EQ(warm.out.substr(0, warm.out.find('\n')), "motor-job");  // the workspace's own copy
    for (const char* krate : {"regex", "serde", "warm-core", "warm-macros", "warm-app"}) {
      EXPECT_NE(warm.out.find(fmt::format("Fresh {} v", krate)), std::string::npos) << krate << "\n" << warm.out;
    }
    EXPECT_EQ(warm.out.find("Compiling"), std::string::npos) << warm.out;  // nothing recompiled
    EXPECT_NE(warm.out.find("\n45\n"), std::string::npos) << warm.out;
  }
  // Edits warm-core in the clone: a new workspace compiles exactly it and its dependant.
  void expect_edited_crates_rebuilt(const std::string& key) {
    sh(clone_, "echo 'pub const EDITED: bool = true;' >> crates/warm-core/src/lib.rs");
    auto edited = run_in_workspace(key, "cargo build -v 2>&1");
    ASSERT_EQ(edited.exit_code, 0) << edited.out << edited.err;
    for (const char* krate : {"warm-core", "warm-app"}) {
      EXPECT_NE(edited.out.find(fmt::format("Compiling {} v", krate)), std::string::npos) << krate << "\n" << edited.out;
    }
    for (const char* krate : {"regex", "serde", "warm-macros"}) {
      EXPECT_NE(edited.out.find(fmt::format("Fresh {} v", krate)), std::string::npos) << krate << "\n" << edited.out;
    }
  }
  std::string main_commit() {
    auto out = sh(clone_, "git rev-parse main");
    return out.substr(0, out.find('\n'));
  }

  std::string base_, shared_, clone_;
  std::vector<std::string> env_;
  std::unique_ptr<RunnerProcess> runner_;
};

TEST_F(CacheFill, a_verified_tip_fills_as_motor_cache_and_publishes_its_target) {
  start_runner("sleep 1; id -u > $CARGO_TARGET_DIR/uid; id -u > " + shared_ + "/written-by-fill");
  auto r = run_in_clone("id -u");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::to_string(uid_of("motor-job")) + "\n");  // the caller's job: never motor-cache
  const std::string first = status();
  EXPECT_EQ(json_field(first, "/result/repositories/0/repository_root"), clone_) << first;
  EXPECT_EQ(json_field(first, "/result/repositories/0/last_rebuild_result"), "building") << first;
  EXPECT_EQ(json_field(first, "/result/repositories/0/published_commit"), "null") << first;
  bool seen_running = false;
  const std::string end = wait_for_fill_end(&seen_running);
  EXPECT_TRUE(seen_running) << "the fill never showed in running_jobs as base:" << clone_;
  ASSERT_EQ(json_field(end, "/result/repositories/0/last_rebuild_result"), "ok") << end << runner_->log();
  EXPECT_EQ(json_field(end, "/result/repositories/0/published_commit"), main_commit());
  EXPECT_NE(json_field(end, "/result/repositories/0/warm_target_age_s"), "null");
  // Its target is published, and its writes reached the shared cache: both as motor-cache.
  const auto published = glob_paths(runner_->state_dir() + "/cache/targets/*.*/uid");
  ASSERT_EQ(published.size(), 1u);
  EXPECT_EQ(read_file(published[0]), std::to_string(uid_of("motor-cache")) + "\n");
  EXPECT_EQ(read_file(shared_ + "/written-by-fill"), std::to_string(uid_of("motor-cache")) + "\n");
  // The same tip again starts no second fill.
  ASSERT_EQ(run_in_clone("true").exit_code, 0);
  EXPECT_EQ(json_field(status(), "/result/repositories/0/last_rebuild_result"), "ok");
  EXPECT_EQ(glob_paths(runner_->state_dir() + "/cache/targets/*.record").size(), 1u);
}

TEST_F(CacheFill, a_failed_fill_is_reported_failed_and_publishes_nothing) {
  start_runner("exit 3");
  ASSERT_EQ(run_in_clone("true").exit_code, 0);
  bool seen_running = false;
  const std::string end = wait_for_fill_end(&seen_running);
  EXPECT_EQ(json_field(end, "/result/repositories/0/last_rebuild_result"), "failed") << end;
  EXPECT_EQ(json_field(end, "/result/repositories/0/published_commit"), "null");
  EXPECT_TRUE(glob_paths(runner_->state_dir() + "/cache/targets/*").empty());
}

TEST_F(CacheFill, current_client_unverified_default_tip_runs_and_prepares_without_fills) {
  start_runner("id -u > " + shared_ + "/written-by-fill");
  sh(clone_, "echo b > b && git add b && git commit -qm 'not pushed'");  // local main ahead of origin's
  auto r = run_in_clone("cat b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "b\n");  // prepared and ran
  EXPECT_NE(r.err.find("no compile-cache fill"), std::string::npos) << r.err;
  const std::string s = status();
  EXPECT_EQ(json_field(s, "/result/repositories"), "[]") << s;
  struct stat st {};
  EXPECT_NE(stat((shared_ + "/written-by-fill").c_str(), &st), 0);
}

// The fill builds the tree at /workspace with its target at /workspace/target, where a caller's
// job builds the same tree: cargo's fingerprints (absolute paths) hold in a copy of it.
// Spares off: each new workspace copies the target on its prepare's path (the next test takes a
// spare made ahead).
TEST_F(CacheFill, a_new_workspace_starts_from_the_published_warm_target_and_its_first_build_is_warm) {
  MOTOR_REQUIRE(access("/usr/bin/cargo", X_OK) == 0, "scripts/setup installs Debian's cargo and rustc");
  push_fixture("rust-workspace");
  start_runner("cargo build", "warm_spares = false\n");
  // The first workspace, made before anything was published, keeps a target of its own.
  ASSERT_EQ(run_in_clone("mkdir target && echo mine > target/own").exit_code, 0);
  bool seen_running = false;
  const std::string end = wait_for_fill_end(&seen_running);
  ASSERT_EQ(json_field(end, "/result/repositories/0/last_rebuild_result"), "ok") << end << runner_->log();

  expect_warm_first_build("warm-1");
  // A tree that differs from the published one rebuilds exactly what differs.
  expect_edited_crates_rebuilt("warm-2");
  // The workspace that existed before is never given the warm target.
  auto old = run_in_clone("cat target/own && test ! -e target/debug && echo untouched");
  EXPECT_EQ(old.out, "mine\nuntouched\n") << old.err;
  // The two new workspaces were handed the warm target (the metric of docs/compile-cache.md).
  const std::string shown = metrics();
  EXPECT_NE(shown.find("motor_cache_warm_target_hits_total 2\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("motor_cache_warm_spares_total{event=\"made\"} 0\n"), std::string::npos) << shown;
}

// With spares (the default): once the host is quiet after the fill, a copy of the warm target is
// made ahead; the next new workspace takes it whole (its own, warm: nothing to compile), and
// another is made for the one after, which starts from it with exactly its edited crates stale.
// `motor cache clear` removes the spare with the target.
TEST_F(CacheFill, a_spare_made_ahead_is_moved_whole_into_the_next_new_workspace) {
  MOTOR_REQUIRE(access("/usr/bin/cargo", X_OK) == 0, "scripts/setup installs Debian's cargo and rustc");
  push_fixture("rust-workspace");
  start_runner("cargo build");
  ASSERT_EQ(run_in_clone("true").exit_code, 0);
  bool seen_running = false;
  const std::string end = wait_for_fill_end(&seen_running);
  ASSERT_EQ(json_field(end, "/result/repositories/0/last_rebuild_result"), "ok") << end << runner_->log();
  ASSERT_TRUE(wait_for_metric("motor_cache_warm_spares_total{event=\"made\"} 1")) << metrics() << runner_->log();
  // A runner that starts finds the spare its predecessor made ready, and copies nothing.
  ASSERT_EQ(runner_->stop(), 0) << runner_->log();
  ASSERT_TRUE(runner_->start()) << runner_->log();

  expect_warm_first_build("spare-1");
  EXPECT_NE(metrics().find("motor_cache_warm_spares_total{event=\"made\"} 0\n"), std::string::npos) << metrics();
  EXPECT_NE(metrics().find("motor_cache_warm_spares_total{event=\"taken\"} 1\n"), std::string::npos) << metrics();
  EXPECT_NE(runner_->log().find("starts from its warm target (a spare made ahead)"), std::string::npos) << runner_->log();

  // The next spare, made once that job ended; an edited tree rebuilds exactly what differs.
  ASSERT_TRUE(wait_for_metric("motor_cache_warm_spares_total{event=\"made\"} 1")) << metrics() << runner_->log();
  expect_edited_crates_rebuilt("spare-2");
  EXPECT_NE(metrics().find("motor_cache_warm_spares_total{event=\"taken\"} 2\n"), std::string::npos) << metrics();

  // A tree with a target of its own keeps it: the spare is neither moved over it nor used up.
  ASSERT_TRUE(wait_for_metric("motor_cache_warm_spares_total{event=\"made\"} 2")) << metrics() << runner_->log();
  sh(clone_, "git checkout -q -- . && sed -i '/target/d' .gitignore && mkdir -p target && echo mine > target/README");
  auto own = run_in_workspace("spare-own", "cat target/README && test ! -e target/debug && echo no-copy");
  EXPECT_EQ(own.out, "mine\nno-copy\n") << own.err << runner_->log();
  EXPECT_NE(metrics().find("motor_cache_warm_spares_total{event=\"taken\"} 2\n"), std::string::npos) << metrics();
  sh(clone_, "git checkout -q -- .gitignore && rm -r target");

  // Cleared with the target: no spare left on disk, and the next new workspace starts cold.
  ASSERT_EQ(runner_->client({"cache", "clear", clone_}).exit_code, 0);
  EXPECT_EQ(sh(runner_->state_dir() + "/workspaces", "find .warm-spares -mindepth 2 | wc -l"), "0\n");
  // Emptied as the job account and removed: nothing left aside either.
  std::string trash;
  for (int i = 0; i < 300; ++i) {
    trash = sh(runner_->state_dir(), "find workspace-trash -mindepth 1 | wc -l");
    if (trash == "0\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(trash, "0\n");
  auto cold = run_in_workspace("spare-3", "test ! -e target && echo cold");
  EXPECT_EQ(cold.out, "cold\n") << cold.err;
}

// A caller's cargo build runs a build script and a proc-macro that rewrite, create and replace
// entries of the shared cache and of CARGO_HOME (set into the shared cache): the build succeeds
// (its private layer takes the writes) and the shared cache is as it was.
TEST_F(CacheFill, a_build_script_and_a_proc_macro_never_change_the_shared_cache) {
  MOTOR_REQUIRE(access("/usr/bin/cargo", X_OK) == 0, "scripts/setup installs Debian's cargo and rustc");
  sh(base_, "mkdir shared-cache/cargo-home && echo kept > shared-cache/cargo-home/entry && "
            "echo kept > shared-cache/replaced && chown -R motor-cache: shared-cache");
  push_fixture("rust-cache-writer");
  start_runner("\"\"");  // no fills: only the caller's job
  const std::string before = tree_listing(shared_);
  auto r = run_in_clone(fmt::format("SHARED_CACHE={0} CARGO_HOME={0}/cargo-home cargo build --offline 2>&1 && "
                                    "target/debug/cache-writer && cat {0}/entry {0}/cargo-home/replaced",
                                    shared_));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("expanded\npoisoned by a proc-macro\nswapped\n"), std::string::npos) << r.out;
  EXPECT_EQ(tree_listing(shared_), before);
}

}  // namespace
}  // namespace motor::test
