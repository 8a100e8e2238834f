// Eviction of the compile cache through a real
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
    runner_ = std::make_unique<RunnerProcess>(fmt::format("cache_paths = {}/shared\ncache_fill_command = {}\n"
                                                          "cache_sweep_interval_s = 1\n{}",
                                                          base_, fill, limits));
    ASSERT_TRUE(runner_->start()) << runner_->log();
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
}

TEST_F(CacheEviction, a_running_fills_workspace_is_never_evicted) {
  start_runner("cache_max_size = 1K\n", 4);
  ASSERT_EQ(runner_->client_in(clone_, {"run", "-c", "true"}, {"XDG_CACHE_HOME=" + base_ + "/xdg"}).exit_code, 0);
  ASSERT_TRUE(wait_until([&] { return !fill_dir().empty(); })) << runner_->log();
  const std::string dir = fill_dir();
  // Sweeps run every second; the fill's workspace is over 1K throughout.
  for (int i = 0; i < 3 && result() == "building"; ++i) {
    EXPECT_TRUE(exists(dir + "/src/Makefile")) << "sweep " << i << " evicted the running fill's workspace";
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
  }
  ASSERT_TRUE(wait_until([&] { return result() != "building"; })) << call("exec.status");
  EXPECT_EQ(result(), "ok") << runner_->log();
}

}  // namespace
}  // namespace motor::test
