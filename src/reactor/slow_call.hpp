// Measures a call made on the loop and logs it when it took longer than a loop should stall
// (DESIGN.md: whatever can block is measured).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string_view>

namespace motor::reactor {

class SlowCall {
 public:
  using Reporter = void (*)(std::string_view what, uint64_t micros);
  SlowCall(std::string_view what, uint64_t threshold_us = 5000) : what_(what), threshold_us_(threshold_us), start_(uv_hrtime()) {}
  ~SlowCall() {
    const uint64_t us = (uv_hrtime() - start_) / 1000;
    if (us >= threshold_us_ && reporter_) reporter_(what_, us);
  }
  SlowCall(const SlowCall&) = delete;
  SlowCall& operator=(const SlowCall&) = delete;
  static void set_reporter(Reporter r) { reporter_ = r; }

 private:
  std::string_view what_;
  uint64_t threshold_us_;
  uint64_t start_;
  static inline Reporter reporter_ = nullptr;
};

}  // namespace motor::reactor
