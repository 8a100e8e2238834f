// The CPU scheduling policies of the runner's processes (base/cpu_policy.hpp): the helpers the
// loop wakes for every job (the job starter, the state writer, libuv's pool threads) are
// SCHED_BATCH, so that their wake-ups never take the CPU from the loop; the loop itself and every
// job stay SCHED_OTHER. bench/README.md has the loop stall figures before and after.
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

// A thread's policy by its id, as the kernel reports it (sched_getscheduler takes a tid), without
// the reset-on-fork flag (reset_on_fork says whether it is set).
int policy_of(pid_t tid) { return sched_getscheduler(tid) & ~SCHED_RESET_ON_FORK; }
bool reset_on_fork(pid_t tid) { return (sched_getscheduler(tid) & SCHED_RESET_ON_FORK) != 0; }
// Field 19 of /proc/PID/task/TID/stat: the nice value.
int nice_of(pid_t pid, pid_t tid) {
  std::ifstream in(fmt::format("/proc/{}/task/{}/stat", pid, tid));
  std::string stat;
  std::getline(in, stat);
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  for (int i = 3; i <= 19 && (fields >> field); ++i) {
  }
  return std::stoi(field);
}

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    out.push_back(static_cast<pid_t>(std::stol(e.path().filename().string())));
  }
  return out;
}

class RunnerScheduling : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(runner_.start()) << runner_.log(); }
  RunnerProcess runner_;
};

TEST_F(RunnerScheduling, TheLoopIsNormalAndTheHelpersItWakesAreBatch) {
  // libuv's pool threads exist from the runner's start (reactor::start_pool_threads_as_batch);
  // one job makes work for them.
  ASSERT_EQ(runner_.client({"run", "--no-sync", "--", "/bin/true"}).exit_code, 0) << runner_.log();
  EXPECT_EQ(policy_of(runner_.pid()), SCHED_OTHER) << "the loop's own thread";
  const pid_t starter = helper_of(runner_.pid(), "motor-starter");
  const pid_t state = helper_of(runner_.pid(), "motor-state");
  ASSERT_GT(starter, 0);
  ASSERT_GT(state, 0);
  EXPECT_EQ(policy_of(starter), SCHED_BATCH) << "the job starter";
  EXPECT_EQ(policy_of(state), SCHED_BATCH) << "the state writer";
  size_t pool_threads = 0;
  for (pid_t tid : threads_of(runner_.pid())) {
    if (tid == runner_.pid()) continue;
    ++pool_threads;
    EXPECT_EQ(policy_of(tid), SCHED_BATCH) << "the runner's thread " << tid;
  }
  EXPECT_GT(pool_threads, 0u) << "the runner has no pool thread";
}

TEST_F(RunnerScheduling, AJobRunsUnderTheDefaultPolicyNotItsStartersBatch) {
  // Field 41 of /proc/PID/stat is the policy: 0 SCHED_OTHER, 3 SCHED_BATCH. The job's motor-init
  // (its pid 1) and the command both.
  auto r = runner_.client({"run", "--no-sync", "-c", "cut -d' ' -f41 /proc/1/stat /proc/self/stat"});
  ASSERT_EQ(r.exit_code, 0) << r.err << runner_.log();
  EXPECT_EQ(r.out, "0\n0\n");
}

// The unit's Nice=-5 (conf/motor-runner.service) is the loop's alone: its helpers, its pool
// threads and the jobs start at nice 0 (base/cpu_policy.hpp, reset_nice_on_fork).
TEST(RunnerNice, ANegativeNiceIsTheLoopsAloneNotItsHelpersOrJobs) {
  RunnerProcess runner;
  runner.use_nice(-5);
  ASSERT_TRUE(runner.start()) << runner.log();
  auto r = runner.client({"run", "--no-sync", "-c", "cut -d' ' -f19 /proc/1/stat /proc/self/stat"});
  ASSERT_EQ(r.exit_code, 0) << r.err << runner.log();
  EXPECT_EQ(r.out, "0\n0\n") << "the job's motor-init and command";
  EXPECT_EQ(nice_of(runner.pid(), runner.pid()), -5) << "the loop's own thread";
  EXPECT_TRUE(reset_on_fork(runner.pid()));
  for (const char* helper : {"motor-starter", "motor-state"}) {
    const pid_t pid = helper_of(runner.pid(), helper);
    ASSERT_GT(pid, 0) << helper;
    EXPECT_EQ(nice_of(pid, pid), 0) << helper;
  }
  for (pid_t tid : threads_of(runner.pid())) {
    if (tid != runner.pid()) {
      EXPECT_EQ(nice_of(runner.pid(), tid), 0) << "the runner's thread " << tid;
    }
  }
}

}  // namespace
}  // namespace motor::test
