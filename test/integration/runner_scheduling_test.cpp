// The CPU scheduling policies of the runner's processes (base/cpu_policy.hpp): the helpers the
// loop wakes for every job (the job starter, the state writer, libuv's pool threads) are
// SCHED_BATCH, so that their wake-ups never take the CPU from the loop; the loop itself and every
// job stay SCHED_OTHER. bench/README.md has the loop stall figures before and after.
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

// A thread's policy by its id, as the kernel reports it (sched_getscheduler takes a tid).
int policy_of(pid_t tid) { return sched_getscheduler(tid); }

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

}  // namespace
}  // namespace motor::test
