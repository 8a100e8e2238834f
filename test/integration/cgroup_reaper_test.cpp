// A cgroup that is still busy when its owner lets it go is not left behind: the reaper kills what
// it still lists and removes it on the loop (src/sandbox/cgroup_reaper.*), and a JobCgroup that is
// destroyed hands itself to it (RAII).
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "sandbox/cgroup.hpp"
#include "sandbox/cgroup_reaper.hpp"

namespace {

using namespace std::chrono_literals;

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

TEST(CgroupReaper, KillsWhatABusyCgroupStillHoldsAndRemovesIt) {
  // The pids hierarchy of v1, or the unified one.
  const std::string root = exists("/sys/fs/cgroup/pids/cgroup.procs") ? "/sys/fs/cgroup/pids" : "/sys/fs/cgroup";
  const std::string dir = root + "/motor-test-retire-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  pid_t pid = -1;
  struct Cleanup {  // whatever fails below, nothing of this test stays
    const std::string& dir;
    pid_t& pid;
    ~Cleanup() {
      if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
      rmdir(dir.c_str());
    }
  } cleanup{dir, pid};
  char sleep_bin[] = "/bin/sleep", sixty[] = "60";
  char* argv[] = {sleep_bin, sixty, nullptr};
  ASSERT_EQ(posix_spawn(&pid, "/bin/sleep", nullptr, nullptr, argv, environ), 0);
  std::ofstream(dir + "/cgroup.procs") << pid << "\n";
  ASSERT_NE(rmdir(dir.c_str()), 0) << "a cgroup with a process in it must be busy";

  uv_loop_t loop;
  uv_loop_init(&loop);
  {
    motor::sandbox::CgroupReaper reaper(&loop);
    reaper.reap(motor::sandbox::remains_of_dirs({dir}, "test cgroup"));
    EXPECT_EQ(reaper.pending(), 1u);
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (reaper.pending() > 0 && std::chrono::steady_clock::now() < until) uv_run(&loop, UV_RUN_ONCE);
    EXPECT_EQ(reaper.pending(), 0u);
  }
  uv_run(&loop, UV_RUN_DEFAULT);  // close callbacks
  EXPECT_EQ(uv_loop_close(&loop), 0);

  EXPECT_FALSE(exists(dir)) << "the cgroup was removed";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);  // at most the sleep's 60 s when it was not killed
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the process it held was killed";
  pid = -1;
}

// The common case at a job's end: its cgroup is empty already, and try_reap's first rmdir
// removes it; a directory that is gone already counts as removed, not as an error.
TEST(CgroupReaper, AnEmptyCgroupIsRemovedAtOnceAndAGoneOneCountsAsRemoved) {
  const std::string root = exists("/sys/fs/cgroup/pids/cgroup.procs") ? "/sys/fs/cgroup/pids" : "/sys/fs/cgroup";
  const std::string dir = root + "/motor-test-empty-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  struct Cleanup {
    const std::string& dir;
    ~Cleanup() { rmdir(dir.c_str()); }
  } cleanup{dir};
  const auto remains = motor::sandbox::remains_of_dirs({dir}, "test cgroup");
  std::string error;
  EXPECT_TRUE(motor::sandbox::try_reap(remains, error)) << error;
  EXPECT_FALSE(exists(dir)) << "the empty cgroup was removed by the one call";
  EXPECT_TRUE(motor::sandbox::try_reap(remains, error)) << "gone already: " << error;
  EXPECT_TRUE(error.empty()) << error;
}

// RAII: the owner only drops its JobCgroup; the process in it is killed and the cgroup removed.
TEST(CgroupReaper, ADroppedJobCgroupIsKilledAndRemoved) {
  const std::string parent = "motor-test-reaper-" + std::to_string(getpid());
  auto driver = motor::sandbox::detect_cgroups(parent);
  ASSERT_TRUE(driver.ok()) << driver.error().message;
  uv_loop_t loop;
  uv_loop_init(&loop);
  pid_t pid = -1;
  std::vector<std::string> dirs;
  {
    motor::sandbox::CgroupReaper reaper(&loop);
    (*driver)->set_reaper(&reaper);
    auto cg = (*driver)->create("job-raii", {});
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    dirs = (*cg)->directories();
    char sleep_bin[] = "/bin/sleep", sixty[] = "60";
    char* argv[] = {sleep_bin, sixty, nullptr};
    ASSERT_EQ(posix_spawn(&pid, "/bin/sleep", nullptr, nullptr, argv, environ), 0);
    for (const auto& d : dirs) std::ofstream(d + "/cgroup.procs") << pid << "\n";
    cg->reset();  // no kill_all(), no remove(): the destructor does both
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (reaper.pending() > 0 && std::chrono::steady_clock::now() < until) uv_run(&loop, UV_RUN_ONCE);
    EXPECT_EQ(reaper.pending(), 0u);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_EQ(uv_loop_close(&loop), 0);
  for (const auto& d : dirs) EXPECT_FALSE(exists(d)) << d << " was left behind";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);  // at most the sleep's 60 s when it was not killed
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the process it held was killed";
  EXPECT_TRUE((*driver)->remove_parent().ok());
}

}  // namespace
