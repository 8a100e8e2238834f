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

void spin_ms(int ms) {  // on the CPU, as a loop's own work would be
  const uint64_t until = uv_hrtime() + static_cast<uint64_t>(ms) * 1000000;
  while (uv_hrtime() < until) {
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
  // Runs `work` once from a timer, then the loop until it has nothing left.
  void run_once(void (*work)()) {
    work_ = work;
    UvHandle<uv_timer_t> timer;
    ASSERT_EQ(timer.init(this, uv_timer_init, &loop_), 0);
    ASSERT_EQ(uv_timer_start(timer.get(), [](uv_timer_t* h) {
      owner_of<CoreStallMeter>(h)->work_();
    }, 1, 0), 0);
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
    timer.close();
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
  }
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
  ASSERT_EQ(traced.size(), 1u);
  EXPECT_NE(traced[0].find(">the inner call "), std::string::npos) << traced[0];
  EXPECT_NE(traced[0].find("; the outer call "), std::string::npos) << traced[0];
}

TEST_F(CoreStallMeter, AShortIterationIsNotTraced) {
  {
    StallMeter meter(&loop_);
    meter.trace_from(50000, [](uint64_t, uint64_t, const std::string& calls) { traced.push_back(calls); });
    run_once([] {
      SlowCall quick("a quick call");
      spin_ms(1);
    });
  }
  EXPECT_TRUE(traced.empty()) << traced[0];
}

}  // namespace
}  // namespace motor::reactor
