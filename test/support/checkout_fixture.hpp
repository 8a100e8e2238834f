// The workspace tests' fixture: a Git checkout of one commit in a temporary directory and a runner
// of the test's own. What the commit holds is each fixture's (checkout_script), and so is the
// runner's extra config. Tests only (gtest).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {

class CheckoutAndRunner : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    MOTOR_REQUIRE(access("/usr/bin/git", X_OK) == 0, "git is installed by scripts/setup");
    base_ = make_temp_dir();
    repo_ = base_ + "/repo";
    env_ = {"XDG_CACHE_HOME=" + base_ + "/cache"};
    sh(base_, git_init_script("repo") + " && " + checkout_script() + " && git add -A && git commit -qm init");
    runner_ = std::make_unique<RunnerProcess>(extra_config());
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override {
    runner_.reset();
    remove_tree(base_);
    // The client's checkout watchers (src/client/checkout_watch.hpp) end with their checkout.
    const std::string watcher = "--checkout-watcher " + base_ + "/";
    for (int i = 0; i < 500 && !processes_with(watcher).empty(); ++i) usleep(10000);
    const auto left = processes_with(watcher);
    EXPECT_TRUE(left.empty()) << "a checkout watcher outlived its checkout";
    for (pid_t pid : left) kill(pid, SIGKILL);
  }
  // Shell steps in the new checkout that make the files of its first commit.
  virtual std::string checkout_script() const = 0;
  virtual std::string extra_config() { return ""; }

  std::string base_, repo_;
  std::vector<std::string> env_;  // the client's cache in base_
  std::unique_ptr<RunnerProcess> runner_;
};

}  // namespace motor::test
