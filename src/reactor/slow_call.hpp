// Measures a call made on the loop and logs it when it took longer than a loop should stall
// (DESIGN.md: whatever can block is measured). With the loop trace on (StallMeter::trace_from),
// every measured call is also noted, so that an iteration that stalled can say what it ran.
#pragma once

#include <time.h>
#include <uv.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace motor::reactor {

class SlowCall {
 public:
  using Reporter = void (*)(std::string_view what, uint64_t micros);
  // A call measured for the loop trace only, never logged by itself (one that holds calls
  // which are logged, or one that is short by nature).
  static constexpr uint64_t kTraceOnly = UINT64_MAX;
  SlowCall(std::string_view what, uint64_t threshold_us = 5000) : what_(what), threshold_us_(threshold_us), start_(uv_hrtime()) {
    ++depth_;
    if (tracing_) start_cpu_ = thread_cpu_ns();
  }
  ~SlowCall() {
    const uint64_t ns = uv_hrtime() - start_;
    --depth_;
    if (tracing_) noted_.push_back({what_, depth_, start_, ns, thread_cpu_ns() - start_cpu_});
    const uint64_t us = ns / 1000;
    if (us >= threshold_us_ && reporter_) reporter_(what_, us);
  }
  SlowCall(const SlowCall&) = delete;
  SlowCall& operator=(const SlowCall&) = delete;
  static void set_reporter(Reporter r) { reporter_ = r; }

  // The loop trace: the calls measured on this thread since the last take_noted(), in the order
  // they ended (an inner call before the one that holds it; `depth` says how deep).
  struct Noted {
    std::string_view what;
    int depth;
    uint64_t start_ns, ns;
    uint64_t cpu_ns;  // of it, on the CPU: the rest it waited (blocked, or kept off the CPU)
  };
  // The calling thread's CPU time (user and system), or 0 if the clock cannot be read.
  static uint64_t thread_cpu_ns() {
    timespec ts{};
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  }
  static void set_tracing(bool on) { tracing_ = on; }
  static std::vector<Noted> take_noted() { return std::exchange(noted_, {}); }

 private:
  std::string_view what_;
  uint64_t threshold_us_;
  uint64_t start_;
  uint64_t start_cpu_ = 0;
  static inline Reporter reporter_ = nullptr;
  static inline thread_local bool tracing_ = false;
  static inline thread_local int depth_ = 0;
  static inline thread_local std::vector<Noted> noted_;
};

}  // namespace motor::reactor
