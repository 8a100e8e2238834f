// What a job's mount table says about the host (issue 15, the mountinfo leak): no caller name, no
// workspace key, no motor-init host path; and workspaces of the layout before opaque names keep
// working after a runner start moved them.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

constexpr const char* kKey = "mv-key-7f3a";

std::string init_path() {
  const std::string runner = MOTOR_RUNNER_BIN;
  return runner.substr(0, runner.rfind('/')) + "/motor-init";
}

// The root field (4th) of the mountinfo line mounted at /workspace.
std::string workspace_root_field(const std::string& mountinfo) {
  std::istringstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    if (f >> id >> parent >> dev >> root >> point && point == "/workspace") return root;
  }
  return "";
}

class RunnerMountView : public ::testing::Test {
 protected:
  void SetUp() override { MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root"); }
};

TEST_F(RunnerMountView, JobsMountTableNamesNeitherCallerNorKeyNorInitPath) {
  RunnerProcess runner;
  ASSERT_TRUE(runner.start()) << runner.log();
  auto r = runner.client({"run", "-w", kKey, "-c", "cat /proc/self/mountinfo /proc/self/mounts /proc/self/mountstats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find(kKey), std::string::npos) << r.out;      // the key
  EXPECT_EQ(r.out.find("/root/"), std::string::npos) << r.out;  // the caller ("root") as a directory
  EXPECT_EQ(r.out.find(init_path()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("motor-init"), std::string::npos) << r.out;  // no bind of it at all
  // The bind's root field is the workspace directory's path within its filesystem: it ends in
  // the opaque id (the workspace root's own place in its filesystem is the accepted limit).
  const std::string dir = runner.workspace(kKey);
  const std::string id = dir.substr(dir.rfind('/') + 1);
  EXPECT_EQ(id.size(), 32u) << dir;
  EXPECT_TRUE(workspace_root_field(r.out).ends_with("/workspaces/" + id)) << r.out;
  struct stat st {};
  EXPECT_EQ(stat(dir.c_str(), &st), 0) << dir;
  // Another caller's same key is another directory.
  EXPECT_NE(runner.workspace(kKey, "bob"), dir);
  // PID 1 is still motor-init by name (exec'd from an fd: the kernel names it after the file).
  auto p = runner.client({"run", "-w", kKey, "-c", "cat /proc/1/comm"});
  EXPECT_EQ(p.out, "motor-init\n") << p.err;
}

// The same job on the test build with the control weakened shows what the fix hides (so the test
// above fails without it).
TEST_F(RunnerMountView, WeakenedNamesShowCallerKeyAndInitPath) {
  RunnerProcess runner;
  runner.use_binary(MOTOR_RUNNER_TESTING_BIN, {"--test-weaken=workspace-names"});
  ASSERT_TRUE(runner.start()) << runner.log();
  auto r = runner.client({"run", "-w", kKey, "-c", "cat /proc/self/mountinfo"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(workspace_root_field(r.out).ends_with(std::string("/workspaces/root/") + kKey)) << r.out;
  EXPECT_NE(r.out.find(init_path()), std::string::npos) << r.out;
}

TEST_F(RunnerMountView, WorkspacesOfTheOldLayoutMoveAtStartAndKeepTheirFiles) {
  const passwd* job = getpwnam("motor-job");
  MOTOR_REQUIRE(job != nullptr, "the motor-job account is missing");
  RunnerProcess runner;
  // <state>/workspaces/<caller>/<key>, as runners before opaque names made it.
  const std::string root = runner.state_dir() + "/workspaces";
  const std::string old_dir = root + "/root/" + kKey;
  for (const std::string& d : {runner.state_dir(), root, root + "/root"}) {
    ASSERT_EQ(mkdir(d.c_str(), 0711), 0) << d;
    chmod(d.c_str(), 0711);
  }
  ASSERT_EQ(mkdir(old_dir.c_str(), 0700), 0);
  write_file(old_dir + "/kept.txt", "from before\n");
  ASSERT_EQ(chown(old_dir.c_str(), job->pw_uid, job->pw_gid), 0);
  ASSERT_EQ(chown((old_dir + "/kept.txt").c_str(), job->pw_uid, job->pw_gid), 0);

  ASSERT_TRUE(runner.start()) << runner.log();
  struct stat st {};
  EXPECT_NE(lstat(old_dir.c_str(), &st), 0) << "the old directory is still there";
  EXPECT_NE(lstat((root + "/root").c_str(), &st), 0) << "the emptied caller directory is still there";
  EXPECT_EQ(read_file(runner.workspace(kKey) + "/kept.txt"), "from before\n");
  auto r = runner.client({"run", "-w", kKey, "-c", "cat kept.txt"});
  EXPECT_EQ(r.out, "from before\n") << r.err;
  auto list = runner.client({"workspace", "list"});
  EXPECT_NE(list.out.find(kKey), std::string::npos) << list.out << list.err;
  EXPECT_NE(runner.log().find("1 workspaces moved"), std::string::npos) << runner.log();
  // A second start finds nothing to move and the same directory.
  ASSERT_EQ(runner.stop(), 0);
  ASSERT_TRUE(runner.start()) << runner.log();
  EXPECT_EQ(runner.client({"run", "-w", kKey, "-c", "cat kept.txt"}).out, "from before\n");
}

}  // namespace
}  // namespace motor::test
