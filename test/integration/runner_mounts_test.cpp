// What a job sees besides its own workspace: shared caches and its caller's sibling workspaces,
// both read-only, and nothing of anyone else's.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

class RunnerMounts : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    cache_ = make_temp_dir();
    chmod(cache_.c_str(), 0755);
    write_file(cache_ + "/entry", "cached\n");
    runner_ = std::make_unique<RunnerProcess>(fmt::format("cache_paths = {}\n", cache_));
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override {
    runner_.reset();
    remove_tree(cache_);
  }
  std::string cache_;
  std::unique_ptr<RunnerProcess> runner_;
};

TEST_F(RunnerMounts, SharedCachesAreReadableAndNeverWritable) {
  auto r = runner_->client({"run", "-c", fmt::format("cat {0}/entry; echo poison > {0}/entry; echo new > {0}/new", cache_)});
  EXPECT_EQ(r.out, "cached\n");
  EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(read_file(cache_ + "/entry"), "cached\n");
  struct stat st {};
  EXPECT_NE(stat((cache_ + "/new").c_str(), &st), 0);
}

TEST_F(RunnerMounts, SiblingsAreReadOnlyAndOnlyTheCallersOwn) {
  ASSERT_EQ(runner_->client({"run", "-w", "lib", "-c", "echo from-lib > out"}).exit_code, 0);
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(
      R"({"id":1,"method":"exec.run","params":{"command":"cat /siblings/lib/out; echo x > /siblings/lib/out","siblings":["lib"]}})"));
  std::string out, terminal;
  for (std::optional<std::string> f; (f = c.read_frame());) {
    if (json_field(*f, "/type") == "output") out += json_field(*f, "/stream");
    if (json_field(*f, "/type") == "terminal") {
      terminal = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(terminal, "/outcome/code"), "1");  // the write failed (bash: a failed redirection is status 1)
  EXPECT_EQ(read_file(runner_->workspace("lib") + "/out"), "from-lib\n");
  // Another caller's workspace of the same name is not a sibling of this caller's jobs.
  auto bob = RawClient::via_bridge(runner_->socket(), "bob");
  ASSERT_TRUE(bob->send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true","siblings":["lib"]}})"));
  std::string refused;
  for (std::optional<std::string> f; (f = bob->read_frame());) {
    if (json_field(*f, "/type") == "terminal") {
      refused = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(refused, "/outcome/reason"), "workspace_setup_failed") << refused;
  // Hostile sibling keys are refused like workspace keys.
  RawClient d(runner_->socket());
  ASSERT_TRUE(d.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true","siblings":["../bob/lib"]}})"));
  std::string hostile;
  for (std::optional<std::string> f; (f = d.read_frame());) {
    if (json_field(*f, "/type") == "terminal") {
      hostile = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(hostile, "/outcome/reason"), "workspace_key_rejected") << hostile;
}

}  // namespace
}  // namespace motor::test
