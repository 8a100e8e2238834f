// Eviction of the compile cache, `motor cache status|clear` and the cache metrics, through a real
// runner, real fills as motor-cache and the real `motor` (docs/compile-cache.md, "Eviction, status
// and clear"). Small limits stand in for a clock: cache_max_age_s = 2 with a sweep every second,
// cache_max_size = 1K so that any fill is over it.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

constexpr uid_t kCallerUid = 4243;  // an allowed account that is not the operator

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

class CacheEviction : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    MOTOR_REQUIRE(getpwnam("motor-cache") != nullptr, "scripts/setup creates motor-cache");
    base_ = make_temp_dir();
    sh(base_, "mkdir shared && chown motor-cache: shared && " + git_init_script("seed") +
                  " && git checkout -qb main && echo 'all:' > Makefile && git add Makefile && git commit -qm a"
                  " && cd .. && git clone -q --bare seed origin.git && git clone -q file://$PWD/origin.git clone");
    clone_ = base_ + "/clone";
  }
  void TearDown() override {
    runner_.reset();
    remove_tree(base_);
  }
  // A fill that leaves a 1 MiB target after `delay_s` seconds.
  void start_runner(const std::string& limits, int delay_s = 0) {
    const std::string fill = fmt::format("sleep {}; head -c 1048576 /dev/zero > $CARGO_TARGET_DIR/blob", delay_s);
    runner_ = std::make_unique<RunnerProcess>(fmt::format("allowed_uids = 0, {}\ncache_paths = {}/shared\ncache_fill_command = {}\n"
                                                          "cache_sweep_interval_s = 1\n{}",
                                                          kCallerUid, base_, fill, limits));
    ASSERT_TRUE(runner_->start()) << runner_->log();
    chmod(runner_->socket().c_str(), 0666);  // the caller's account is in no group of the socket
  }
  std::string call(const std::string& method, const std::string& params = "{}") {
    RawClient c(runner_->socket());
    return call_method(c, 1, method, params);
  }
  std::string result() { return json_field(call("exec.status"), "/result/repositories/0/last_rebuild_result"); }
  // Runs in the clone (its verified tip queues a fill) and waits for the fill's end.
  void fill_and_wait(const char* expected = "ok") {
    ASSERT_EQ(runner_->client_in(clone_, {"run", "-c", "true"}, {"XDG_CACHE_HOME=" + base_ + "/xdg"}).exit_code, 0);
    ASSERT_TRUE(wait_until([&] { return result() != "building"; })) << call("exec.status");
    ASSERT_EQ(result(), expected) << call("exec.status") << runner_->log();
  }
  std::string cache_dir() const { return runner_->state_dir() + "/cache"; }
  std::string fill_dir() const {
    auto dirs = glob_paths(cache_dir() + "/fills/*");
    return dirs.size() == 1 ? dirs[0] : "";
  }
  std::string commit() {
    auto out = sh(clone_, "git rev-parse main");
    return out.substr(0, out.find('\n'));
  }
  std::string metrics() { return json_field(call("runner.status", R"({"metrics":true})"), "/result/metrics"); }

  std::string base_, clone_;
  std::unique_ptr<RunnerProcess> runner_;
};

TEST_F(CacheEviction, an_unused_repository_past_the_age_loses_its_target_and_shows_never_built) {
  start_runner("cache_max_age_s = 2\n");
  fill_and_wait();
  EXPECT_EQ(json_field(call("exec.status"), "/result/repositories/0/published_commit"), commit());
  ASSERT_EQ(glob_paths(cache_dir() + "/targets/*.record").size(), 1u);
  // Nothing uses it: a sweep past 2 s removes the newest target too, and exec.status says so.
  ASSERT_TRUE(wait_until([&] { return result() == "null"; }, std::chrono::seconds(20))) << call("exec.status");
  const std::string status = call("exec.status");
  EXPECT_EQ(json_field(status, "/result/repositories/0/published_commit"), "null") << status;
  EXPECT_EQ(json_field(status, "/result/repositories/0/warm_target_age_s"), "null") << status;
  EXPECT_TRUE(glob_paths(cache_dir() + "/targets/*").empty());
  EXPECT_EQ(fill_dir(), "");
  EXPECT_TRUE(wait_until([&] { return glob_paths(cache_dir() + "/trash/*").empty(); }));
  EXPECT_NE(metrics().find("motor_cache_evictions_total{reason=\"age\"} 2\n"), std::string::npos) << metrics();
}

TEST_F(CacheEviction, over_the_size_the_fill_workspace_goes_and_the_newest_target_stays) {
  start_runner("cache_max_size = 1K\n");
  fill_and_wait();
  ASSERT_TRUE(wait_until([&] { return fill_dir().empty(); }, std::chrono::seconds(20))) << runner_->log();
  EXPECT_EQ(glob_paths(cache_dir() + "/targets/*." + commit() + "/blob").size(), 1u);
  const std::string status = call("exec.status");
  EXPECT_EQ(json_field(status, "/result/repositories/0/last_rebuild_result"), "ok") << status;
  EXPECT_EQ(json_field(status, "/result/repositories/0/published_commit"), commit()) << status;
  // Still over the size with only the newest target left: it stays, sweep after sweep.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(json_field(call("exec.status"), "/result/repositories/0/published_commit"), commit());
  EXPECT_NE(metrics().find("motor_cache_evictions_total{reason=\"size\"} 1\n"), std::string::npos) << metrics();
}

TEST_F(CacheEviction, a_running_fills_workspace_is_never_evicted) {
  start_runner("cache_max_size = 1K\n", 4);
  ASSERT_EQ(runner_->client_in(clone_, {"run", "-c", "true"}, {"XDG_CACHE_HOME=" + base_ + "/xdg"}).exit_code, 0);
  ASSERT_TRUE(wait_until([&] { return !fill_dir().empty(); })) << runner_->log();
  const std::string dir = fill_dir();
  // Sweeps run every second and on each cache.status; the fill's workspace is over 1K throughout.
  for (int i = 0; i < 3 && result() == "building"; ++i) {
    EXPECT_EQ(json_field(call("cache.status"), "/result/repositories/0/in_use"), "true");
    EXPECT_TRUE(exists(dir + "/tree/Makefile")) << "sweep " << i << " evicted the running fill's workspace";
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
  }
  ASSERT_TRUE(wait_until([&] { return result() != "building"; })) << call("exec.status");
  EXPECT_EQ(result(), "ok") << runner_->log();
}

TEST_F(CacheEviction, status_and_clear_are_the_operators_and_a_caller_is_refused) {
  start_runner("");
  fill_and_wait();
  // A caller: an allowed account that is neither root nor the runner's.
  auto caller = RawClient::as_account(runner_->socket(), kCallerUid, kCallerUid);
  ASSERT_TRUE(caller && caller->connected());
  for (const char* method : {"cache.status", "cache.clear"}) {
    const std::string reply = call_method(*caller, 2, method, "{}");
    EXPECT_EQ(json_field(reply, "/error/code"), "unauthorized") << reply;
  }
  EXPECT_EQ(result(), "ok");  // the refused clear removed nothing
  // The operator's status, as a person reads it and as JSON.
  auto text = runner_->client({"cache", "status"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(commit().substr(0, 12)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(clone_), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("limits: cache_max_size 50G"), std::string::npos) << text.out;
  auto js = runner_->client({"cache", "status", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  EXPECT_EQ(json_field(js.out, "/result/repositories/0/published_commit"), commit()) << js.out;
  EXPECT_NE(json_field(js.out, "/result/repositories/0/target_bytes"), "0") << js.out;
  EXPECT_EQ(json_field(js.out, "/result/limits/max_age_s"), "1209600") << js.out;
  // An unknown repository is an error; the operator's clear of this one removes it all.
  EXPECT_EQ(runner_->client({"cache", "clear", "/no/such/repo"}).exit_code, 64);
  auto cleared = runner_->client({"cache", "clear", clone_});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_NE(cleared.out.find("cleared " + clone_), std::string::npos) << cleared.out;
  const std::string status = call("exec.status");
  EXPECT_EQ(json_field(status, "/result/repositories/0/last_rebuild_result"), "null") << status;
  EXPECT_EQ(json_field(status, "/result/repositories/0/published_commit"), "null") << status;
  EXPECT_TRUE(glob_paths(cache_dir() + "/targets/*").empty());
  EXPECT_EQ(fill_dir(), "");
}

TEST_F(CacheEviction, an_exec_remote_caller_never_reaches_the_cache_methods) {
  start_runner("");
  // The endpoint runs as root here, whom the runner would answer: the endpoint itself refuses.
  auto endpoint = RawClient::via_program({MOTOR_CLIENT_BIN, "exec-remote", "--stdio", "--socket", runner_->socket()});
  ASSERT_TRUE(endpoint && endpoint->connected());
  for (const char* method : {"cache.status", "cache.clear"}) {
    const std::string reply = call_method(*endpoint, 3, method, "{}");
    EXPECT_EQ(json_field(reply, "/error/code"), "bad_request") << reply;
    EXPECT_NE(json_field(reply, "/error/message").find("unknown method"), std::string::npos) << reply;
  }
  EXPECT_NE(json_field(call("cache.status"), "/result/limits"), "<missing>");  // the operator's own session has them
}

TEST_F(CacheEviction, clear_during_a_fill_is_refused_until_it_ends) {
  start_runner("", 3);
  ASSERT_EQ(runner_->client_in(clone_, {"run", "-c", "true"}, {"XDG_CACHE_HOME=" + base_ + "/xdg"}).exit_code, 0);
  ASSERT_EQ(result(), "building");
  const std::string busy = call("cache.clear");
  EXPECT_EQ(json_field(busy, "/error/code"), "cache_busy") << busy;
  EXPECT_NE(json_field(busy, "/error/message").find("queued or running"), std::string::npos) << busy;
  auto cli = runner_->client({"cache", "clear", clone_});
  EXPECT_EQ(cli.exit_code, 75) << cli.err;  // try again later
  ASSERT_TRUE(wait_until([&] { return result() != "building"; })) << call("exec.status");
  EXPECT_EQ(result(), "ok");  // the refused clears did not disturb the fill
  const std::string cleared = call("cache.clear");
  EXPECT_EQ(json_field(cleared, "/result/cleared/0/repository_root"), clone_) << cleared;
  EXPECT_EQ(result(), "null");
  EXPECT_TRUE(glob_paths(cache_dir() + "/targets/*").empty());
}

TEST_F(CacheEviction, the_cache_metrics_count_fills_bytes_and_evictions_and_promtool_accepts_them) {
  start_runner("cache_max_size = 1K\n");
  fill_and_wait();
  ASSERT_TRUE(wait_until([&] { return fill_dir().empty(); }, std::chrono::seconds(20)));
  (void)call("cache.status");  // a sweep after the eviction: the gauges count what is left
  const std::string text = metrics();
  EXPECT_NE(text.find("motor_cache_fills_started_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("motor_cache_fills_finished_total{result=\"ok\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("motor_cache_fills_finished_total{result=\"failed\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("motor_cache_warm_target_hits_total "), std::string::npos) << text;
  EXPECT_NE(text.find("motor_cache_bytes{kind=\"fill\"} 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("motor_cache_bytes{kind=\"target\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("motor_cache_evictions_total{reason=\"size\"} 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("motor_cache_evicted_bytes_total{reason=\"size\"} 0\n"), std::string::npos) << text;
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    const char* ci = getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "promtool is missing under CI=true (scripts/setup installs it)";
    GTEST_SKIP() << "promtool is not installed (scripts/setup installs it)";
  }
  const std::string path = base_ + "/metrics.prom";
  write_file(path, text);
  auto lint = run_program({"/bin/sh", "-c", "promtool check metrics < " + path + " 2>&1"});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << text;
}

}  // namespace
}  // namespace motor::test
