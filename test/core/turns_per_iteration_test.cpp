// reactor::TurnsPerIteration on a real libuv loop: never more than its turns between two polls
// (the stall meter's iteration), those that wait resume in the order they waited and ahead of
// new work, and every waiter gets its turn. Built under ASan+UBSan too.
#include <gtest/gtest.h>
#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "reactor/turns_per_iteration.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::reactor {
namespace {

class CoreTurns : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(uv_loop_init(&loop_), 0); }
  void TearDown() override {
    turns_.reset();
    meter_.close();
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle was left open";
  }
  // Counts the turns taken between two prepare phases (as reactor::StallMeter splits the loop).
  void watch_iterations() {
    ASSERT_EQ(meter_.init(this, uv_prepare_init, &loop_), 0);
    ASSERT_EQ(uv_prepare_start(meter_.get(), [](uv_prepare_t* h) {
      auto* self = owner_of<CoreTurns>(h);
      self->per_iteration_.push_back(self->taken_now_);
      self->taken_now_ = 0;
    }), 0);
    uv_unref(meter_.handle());
  }
  // A worker with `items` to do, one per turn, that waits when the turns run out.
  void work(const std::string& name, int items) {
    while (items > 0) {
      if (!turns_->take()) {
        turns_->wait([this, name, items] { work(name, items); });
        return;
      }
      ++taken_now_;
      done_.push_back(name);
      --items;
    }
  }

  uv_loop_t loop_{};
  std::unique_ptr<TurnsPerIteration> turns_;
  UvHandle<uv_prepare_t> meter_;
  int taken_now_ = 0;
  std::vector<int> per_iteration_;
  std::vector<std::string> done_;
};

TEST_F(CoreTurns, NeverMoreThanItsTurnsPerIterationAndEveryWaiterIsServed) {
  watch_iterations();
  turns_ = std::make_unique<TurnsPerIteration>(&loop_, 4);
  ASSERT_TRUE(turns_->capped());
  // Twenty requests arriving in one callback (a poll that read twenty sessions at once).
  for (int i = 0; i < 20; ++i) work("s" + std::to_string(i), 1);
  EXPECT_EQ(done_.size(), 4u) << "only four run in the iteration they arrived in";
  EXPECT_EQ(turns_->waiting(), 16u);
  for (int i = 0; i < 50 && turns_->waiting() > 0; ++i) uv_run(&loop_, UV_RUN_NOWAIT);
  per_iteration_.push_back(taken_now_);
  ASSERT_EQ(done_.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(done_[i], "s" + std::to_string(i)) << "served in the order they came";
  for (int n : per_iteration_) EXPECT_LE(n, 4) << "an iteration took more turns than the cap";
}

TEST_F(CoreTurns, WaitersGoAheadOfNewWorkAndAWorkerThatRunsOutWaitsBehindTheOthers) {
  turns_ = std::make_unique<TurnsPerIteration>(&loop_, 2);
  work("a", 5);  // two now, three wait
  work("b", 1);  // waits behind a
  EXPECT_EQ(done_, (std::vector<std::string>{"a", "a"}));
  uv_run(&loop_, UV_RUN_NOWAIT);  // the poll's turns were used: nothing resumes yet
  work("c", 1);  // new work in a fresh iteration still queues behind the waiters
  for (int i = 0; i < 20 && turns_->waiting() > 0; ++i) uv_run(&loop_, UV_RUN_NOWAIT);
  EXPECT_EQ(done_, (std::vector<std::string>{"a", "a", "a", "a", "b", "c", "a"}));
}

}  // namespace
}  // namespace motor::reactor
