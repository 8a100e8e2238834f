// runner::JobLogStock on a real libuv loop and its pool: logs made ahead are renamed into place
// as new jobs' logs (empty, appendable, readable after a restart), the stock tops itself up, an
// empty stock still makes a log on the spot, and ready logs an earlier runner left are used
// again. Built under ASan+UBSan too.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <uv.h>

#include <cstdlib>
#include <string>

#include "runner/job_log_stock.hpp"

namespace motor::runner {
namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

class CoreJobLogStock : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    char tmpl[] = "/tmp/motor-log-stock-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
    EXPECT_EQ(uv_loop_close(&loop_), 0);
    ASSERT_EQ(std::system(("rm -rf " + root_).c_str()), 0);
  }
  // Runs the loop until the pool's answers are in.
  void settle(JobLogStock& stock, size_t want) {
    for (int i = 0; i < 2000 && stock.ready() < want; ++i) uv_run(&loop_, UV_RUN_ONCE);
  }
  uv_loop_t loop_{};
  std::string root_;
};

TEST_F(CoreJobLogStock, AReadyLogBecomesTheJobsLogAndTheStockTopsItselfUpInOneBatch) {
  JobLogStock stock(&loop_, root_ + "/ready", 4);
  stock.refill();
  settle(stock, 4);
  ASSERT_EQ(stock.ready(), 4u);
  auto log = stock.create(root_ + "/job-1", 1 << 20);
  ASSERT_TRUE(log) << log.error().message;
  EXPECT_TRUE(is_dir(root_ + "/job-1"));
  EXPECT_EQ(log->last_seq(), 0);
  ASSERT_TRUE(log->append(JobLog::Kind::kStdout, "hello"));
  settle(stock, 4);
  EXPECT_EQ(stock.ready(), 3u) << "above half the stock, nothing is made";
  ASSERT_TRUE(stock.create(root_ + "/job-2", 1 << 20));
  EXPECT_EQ(stock.ready(), 2u);
  settle(stock, 4);
  EXPECT_EQ(stock.ready(), 4u) << "down to half, the stock makes the rest on the pool";
  auto reopened = JobLog::open(root_ + "/job-1", 1 << 20, false);
  ASSERT_TRUE(reopened) << reopened.error().message;
  EXPECT_EQ(reopened->last_seq(), 1);
}

TEST_F(CoreJobLogStock, AnEmptyStockStillMakesTheLogAndLeftoversAreUsedAgain) {
  {
    JobLogStock none(&loop_, root_ + "/ready", 0);
    auto log = none.create(root_ + "/job-1", 1 << 20);
    ASSERT_TRUE(log) << log.error().message;
    EXPECT_TRUE(is_dir(root_ + "/job-1"));
  }
  {
    JobLogStock first(&loop_, root_ + "/ready", 2);
    first.refill();
    settle(first, 2);
  }  // a runner that stopped with two ready logs
  JobLogStock next(&loop_, root_ + "/ready", 0);
  EXPECT_EQ(next.ready(), 2u) << "the logs an earlier runner made are in the stock at once";
  auto log = next.create(root_ + "/job-2", 1 << 20);
  ASSERT_TRUE(log) << log.error().message;
  EXPECT_EQ(log->last_seq(), 0);
  EXPECT_EQ(next.ready(), 1u);
}

}  // namespace
}  // namespace motor::runner
