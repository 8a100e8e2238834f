// Measures how long each loop iteration spent running callbacks rather than waiting in the
// kernel: the loop's stall, the time every other client waited. Uses libuv's idle-time metric,
// so I/O callbacks run inside the poll phase are counted too.
#pragma once

#include <uv.h>

#include <cstdint>

#include "reactor/uv_handle.hpp"

namespace motor::reactor {

class StallMeter {
 public:
  // Call before the loop first runs (libuv's idle-time metric must be enabled up front).
  explicit StallMeter(uv_loop_t* loop);
  uint64_t worst_us() const { return worst_ns_ / 1000; }
  // Resets the worst figure (the benchmark measures one phase at a time).
  void reset() { worst_ns_ = 0; }

 private:
  UvHandle<uv_prepare_t> prepare_;  // runs once per iteration, right before polling
  uv_loop_t* loop_;
  uint64_t last_ns_ = 0;
  uint64_t last_idle_ns_ = 0;
  uint64_t worst_ns_ = 0;
};

}  // namespace motor::reactor
