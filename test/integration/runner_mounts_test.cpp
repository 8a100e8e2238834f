// What a job sees besides its own workspace: shared caches and its caller's sibling workspaces,
// caches under a private writable layer, siblings read-only, and nothing of anyone else's.
#include <gtest/gtest.h>
#include <pwd.h>
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
    const passwd* cache_owner = getpwnam("motor-cache");
    MOTOR_REQUIRE(cache_owner != nullptr, "scripts/setup creates motor-cache");
    cache_ = make_temp_dir();
    chmod(cache_.c_str(), 0755);
    write_file(cache_ + "/entry", "cached\n");
    mkdir((cache_ + "/sub").c_str(), 0755);
    write_file(cache_ + "/sub/deep", "deep\n");
    // Owned as the fills leave it: by motor-cache (the job sees it as its own through the layer).
    for (const std::string& p : {cache_, cache_ + "/entry", cache_ + "/sub", cache_ + "/sub/deep"}) {
      ASSERT_EQ(lchown(p.c_str(), cache_owner->pw_uid, cache_owner->pw_gid), 0);
    }
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

// A caller's job writes into a shared cache as a build would (a new entry, an entry rewritten in
// place, one replaced by rename): it succeeds, in its private layer (sandbox/overlay.hpp). The
// shared cache is byte for byte as it was, the next job sees none of it, and no mount is left.
TEST_F(RunnerMounts, CacheWritesSucceedInAPrivateLayerAndNeverReachTheSharedCache) {
  const std::string before = tree_listing(cache_);
  auto r = runner_->client({"run", "-c", fmt::format("cat {0}/entry && echo poison > {0}/entry && echo new > {0}/new && "
                                                     "echo swapped > {0}/tmp && mv {0}/tmp {0}/sub/deep && cat {0}/entry {0}/new",
                                                     cache_)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cached\npoison\nnew\n");
  EXPECT_EQ(tree_listing(cache_), before);  // control: without the layer, the job's writes land here
  auto second = runner_->client({"run", "-c", fmt::format("cat {0}/entry {0}/sub/deep; test ! -e {0}/new && echo no-new", cache_)});
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, "cached\ndeep\nno-new\n");
  EXPECT_EQ(read_file("/proc/self/mountinfo").find(cache_), std::string::npos);  // nothing mounted over it on the host
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
