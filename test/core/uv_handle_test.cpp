// reactor::UvHandle on a real libuv loop: closing hands the handle to libuv, and the same owner
// can init it again (a systemd job's timer was re-armed after close and crashed uv_timer_init).
#include <gtest/gtest.h>
#include <uv.h>

#include "reactor/uv_handle.hpp"

namespace motor::reactor {
namespace {

struct Fired {
  int count = 0;
};

void start_once(UvHandle<uv_timer_t>& timer, uv_loop_t* loop, Fired& fired) {
  ASSERT_EQ(timer.init(&fired, uv_timer_init, loop), 0);
  ASSERT_EQ(uv_timer_start(timer.get(), [](uv_timer_t* h) { ++owner_of<Fired>(h)->count; }, 1, 0), 0);
}

TEST(UvHandle, AClosedTimerCanBeInitAndFireAgain) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  Fired fired;
  {
    UvHandle<uv_timer_t> timer;
    start_once(timer, &loop, fired);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    timer.close();
    EXPECT_FALSE(timer.live());
    start_once(timer, &loop, fired);
    EXPECT_TRUE(timer.live());
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  }
  EXPECT_EQ(fired.count, 2);
  ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);  // the close callbacks free both handles
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

TEST(UvHandle, ANeverInitHandleIsFreedWithoutTheLoop) {
  UvHandle<uv_timer_t> timer;
  EXPECT_NE(timer.get(), nullptr);
  EXPECT_FALSE(timer.live());
}  // ASan: no leak, no close through libuv

}  // namespace
}  // namespace motor::reactor
