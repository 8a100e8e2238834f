// reactor::IterationBudget on a real libuv loop: steps that arrive in one poll (three ready fds)
// are spread over iterations once one has spent the budget, none is lost, and without a budget
// they all run at once. Built under ASan+UBSan too.
#include <gtest/gtest.h>
#include <unistd.h>
#include <uv.h>

#include <array>
#include <memory>
#include <vector>

#include "reactor/iteration_budget.hpp"
#include "reactor/stall_meter.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::reactor {
namespace {

constexpr int kSteps = 3;

class CoreIterationBudget : public ::testing::Test {
 public:
  void SetUp() override {
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    stall_ = std::make_unique<StallMeter>(&loop_);  // the iterations the budget counts in
    ASSERT_EQ(meter_.init(this, uv_prepare_init, &loop_), 0);
    ASSERT_EQ(uv_prepare_start(meter_.get(), [](uv_prepare_t* h) {
      auto* self = owner_of<CoreIterationBudget>(h);
      if (self->taken_now_ > 0) self->per_iteration_.push_back(self->taken_now_);
      self->taken_now_ = 0;
    }), 0);
    uv_unref(meter_.handle());
  }
  void TearDown() override {
    for (auto& p : polls_) p.close();
    budget_.reset();
    stall_.reset();
    meter_.close();
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle was left open";
    for (auto& fds : pipes_) {
      for (int fd : fds) {
        if (fd >= 0) close(fd);  // a test without pipes has none to close (never stdin)
      }
    }
  }
  // Three pipes made readable at once; each step reads its byte and then works `work_us` (more
  // than the budget), unless the budget says to wait.
  void start_steps() {
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_EQ(pipe(pipes_[i].data()), 0);
      ASSERT_EQ(write(pipes_[i][1], "x", 1), 1);
      ASSERT_EQ(polls_[i].init(this, uv_poll_init, &loop_, pipes_[i][0]), 0);
      ASSERT_EQ(uv_poll_start(polls_[i].get(), UV_READABLE, [](uv_poll_t* h, int, int) {
        if (auto* self = owner_of<CoreIterationBudget>(h)) self->step(h);
      }), 0);
    }
  }
  void step(uv_poll_t* h) {
    if (IterationBudget::defer()) return;  // its byte stays: the poll reports it again
    char c = 0;
    ASSERT_EQ(read(uv_fileno_or(h), &c, 1), 1);
    uv_poll_stop(h);
    const uint64_t until = uv_hrtime() + kWorkUs * 1000;
    while (uv_hrtime() < until) {
    }
    ++taken_now_;
    ++done_;
  }
  static int uv_fileno_or(uv_poll_t* h) {
    uv_os_fd_t fd = -1;
    uv_fileno(reinterpret_cast<uv_handle_t*>(h), &fd);
    return fd;
  }
  void run_until_done() {
    for (int i = 0; i < 50 && done_ < kSteps; ++i) uv_run(&loop_, UV_RUN_ONCE);
    if (taken_now_ > 0) per_iteration_.push_back(taken_now_);
  }

  static constexpr uint64_t kWorkUs = 1500;
  uv_loop_t loop_{};
  std::unique_ptr<StallMeter> stall_;
  std::unique_ptr<IterationBudget> budget_;
  UvHandle<uv_prepare_t> meter_;
  std::array<UvHandle<uv_poll_t>, kSteps> polls_;
  std::array<std::array<int, 2>, kSteps> pipes_ = {{{-1, -1}, {-1, -1}, {-1, -1}}};
  int taken_now_ = 0;
  int done_ = 0;
  std::vector<int> per_iteration_;
};

TEST_F(CoreIterationBudget, StepsReadyAtOnceRunOnePerIterationOnceEachSpendsTheBudget) {
  budget_ = std::make_unique<IterationBudget>(*stall_, 1000);
  start_steps();
  run_until_done();
  EXPECT_EQ(done_, kSteps) << "a step that waited was lost";
  EXPECT_EQ(per_iteration_, (std::vector<int>{1, 1, 1})) << "an iteration ran a step past its budget";
  EXPECT_EQ(IterationBudget::deferred_total(), 3u) << "two wait in the first iteration, one in the second";
}

// Other work (a check handle here, as the runner's save) spends the budget before the step (an
// idle handle, as admission's start) in every iteration: the step is left once, then taken.
TEST_F(CoreIterationBudget, AStepLeftByAnIterationBusyWithOtherWorkIsTakenInTheNext) {
  budget_ = std::make_unique<IterationBudget>(*stall_, 1000);
  UvHandle<uv_check_t> other;
  UvHandle<uv_idle_t> stepper;
  ASSERT_EQ(other.init(this, uv_check_init, &loop_), 0);
  ASSERT_EQ(uv_check_start(other.get(), [](uv_check_t*) {
    const uint64_t until = uv_hrtime() + kWorkUs * 1000;
    while (uv_hrtime() < until) {
    }
  }), 0);
  ASSERT_EQ(stepper.init(this, uv_idle_init, &loop_), 0);
  ASSERT_EQ(uv_idle_start(stepper.get(), [](uv_idle_t* h) {
    auto* self = owner_of<CoreIterationBudget>(h);
    if (IterationBudget::defer()) return;
    ++self->taken_now_;
    if (++self->done_ == kSteps) uv_idle_stop(h);
  }), 0);
  int iterations = 0;
  for (; iterations < 20 && done_ < kSteps; ++iterations) uv_run(&loop_, UV_RUN_NOWAIT);
  EXPECT_EQ(done_, kSteps) << "the step starved behind the other work";
  EXPECT_LE(iterations, 2 * kSteps + 1) << "a step waited more than one iteration";
  EXPECT_GE(IterationBudget::deferred_total(), 1u);
}

TEST_F(CoreIterationBudget, WithoutABudgetEveryReadyStepRunsAtOnce) {
  budget_ = std::make_unique<IterationBudget>(*stall_, 0);
  start_steps();
  run_until_done();
  EXPECT_EQ(done_, kSteps);
  EXPECT_EQ(per_iteration_, (std::vector<int>{3}));
  EXPECT_FALSE(IterationBudget::defer());
}

}  // namespace
}  // namespace motor::reactor
