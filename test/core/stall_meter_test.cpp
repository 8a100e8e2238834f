// reactor::StallMeter on a real libuv loop: an iteration that runs long is measured, and with
// the loop trace on it is reported with the measured calls (reactor::SlowCall) it ran, nested
// ones marked; a short iteration is not reported. Built under ASan+UBSan too.
#include <gtest/gtest.h>
#include <time.h>
#include <uv.h>

#include <string>
#include <vector>

#include "reactor/slow_call.hpp"
#include "reactor/stall_meter.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::reactor {
namespace {

std::vector<std::string> traced;

// Busy for `ms` of this thread's CPU time, as a loop's own work would be: on a loaded host the
// wall time is longer, never shorter.
void spin_ms(int ms) {
  const uint64_t until = SlowCall::thread_cpu_ns() + static_cast<uint64_t>(ms) * 1000000;
  while (SlowCall::thread_cpu_ns() < until) {
  }
}

class CoreStallMeter : public ::testing::Test {
 protected:
  void SetUp() override {
    traced.clear();
    ASSERT_EQ(uv_loop_init(&loop_), 0);
  }
  void TearDown() override {
    SlowCall::set_tracing(false);
    (void)SlowCall::take_noted();
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);  // the meter's handle, closed
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle was left open";
  }
  // Runs `work` once from a timer, in a later iteration than the meter's first look (a timer
  // started by another timer's callback never runs in the same pass), then the loop until it
  // has nothing left. On a loaded host a timer of the first iteration could be due before the
  // meter had begun, and its work went unmeasured.
  void run_once(void (*work)()) {
    work_ = work;
    ASSERT_EQ(first_.init(this, uv_timer_init, &loop_), 0);
    ASSERT_EQ(second_.init(this, uv_timer_init, &loop_), 0);
    ASSERT_EQ(uv_timer_start(first_.get(), [](uv_timer_t* h) {
      auto* self = owner_of<CoreStallMeter>(h);
      EXPECT_EQ(uv_timer_start(self->second_.get(), [](uv_timer_t* t) { owner_of<CoreStallMeter>(t)->work_(); }, 1, 0), 0);
    }, 0, 0), 0);
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
    first_.close();
    second_.close();
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
  }
  UvHandle<uv_timer_t> first_, second_;
  uv_loop_t loop_{};
  void (*work_)() = nullptr;
};

TEST_F(CoreStallMeter, ALongIterationIsMeasured) {
  {
    StallMeter meter(&loop_);
    run_once([] { spin_ms(20); });
    EXPECT_GE(meter.worst_us(), 19000u);
    EXPECT_GE(meter.worst_cpu_us(), 10000u);
  }
}

TEST_F(CoreStallMeter, TheTraceNamesWhatALongIterationRan) {
  {
    StallMeter meter(&loop_);
    meter.trace_from(5000, [](uint64_t wall_us, uint64_t, const std::string& calls) {
      traced.push_back(std::to_string(wall_us / 1000) + " " + calls);
    });
    run_once([] {
      SlowCall outer("the outer call");
      spin_ms(2);
      {
        SlowCall inner("the inner call");
        spin_ms(10);
      }
    });
  }
  // The iteration that ran them (a loaded host may stall another one past the threshold too).
  size_t with_calls = 0;
  for (const std::string& t : traced) {
    if (t.find(">the inner call ") == std::string::npos) continue;
    ++with_calls;
    EXPECT_NE(t.find("; the outer call "), std::string::npos) << t;
    EXPECT_GE(std::stoul(t.substr(0, t.find(' '))), 12u) << t;  // the iteration's wall ms
  }
  EXPECT_EQ(with_calls, 1u);
}

TEST_F(CoreStallMeter, AShortIterationIsNotTraced) {
  {
    StallMeter meter(&loop_);
    // 10 s: far above the iteration's 1 ms of work even on a loaded host.
    meter.trace_from(10000000, [](uint64_t, uint64_t, const std::string& calls) { traced.push_back(calls); });
    run_once([] {
      SlowCall quick("a quick call");
      spin_ms(1);
    });
  }
  EXPECT_TRUE(traced.empty()) << traced[0];
}

}  // namespace
}  // namespace motor::reactor
