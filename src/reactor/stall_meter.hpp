// Measures how long each loop iteration spent running callbacks rather than waiting in the
// kernel: the loop's stall, the time every other client waited. Uses libuv's idle-time metric,
// so I/O callbacks run inside the poll phase are counted too. Beside that wall time, the
// thread's CPU time per iteration: what the loop itself computed, without the time a loaded
// host kept it off the CPU (which the wall figure includes).
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reactor/slow_call.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::reactor {

class StallMeter {
 public:
  // Call before the loop first runs (libuv's idle-time metric must be enabled up front).
  explicit StallMeter(uv_loop_t* loop);
  uint64_t worst_us() const { return worst_ns_ / 1000; }
  // The most CPU time one iteration used (0 where the thread's CPU clock cannot be read).
  uint64_t worst_cpu_us() const { return worst_cpu_ns_ / 1000; }
  // The loop trace (a diagnostic: bench/README.md): every iteration that stalls the loop for
  // `threshold_us` or more is reported with the measured calls (reactor::SlowCall) it ran,
  // "what start+duration (CPU time)" in microseconds from the iteration's start, nested ones
  // marked with '>'.
  using TraceReporter = void (*)(uint64_t wall_us, uint64_t cpu_us, const std::string& calls);
  void trace_from(uint64_t threshold_us, TraceReporter reporter);
  // Resets the worst figures (the benchmark measures one phase at a time). The iteration that
  // calls it is not counted: what ran before the reset in it belongs to the phase before.
  void reset() {
    worst_ns_ = 0;
    worst_cpu_ns_ = 0;
    last_ns_ = 0;
  }
  // Iterations begun (prepares seen) so far, and how long the current one has been busy: the
  // time since its prepare less what its poll waited (0 before the first prepare, after a reset,
  // and without the meter's handle). What IterationBudget reads.
  uint64_t iterations() const { return iterations_; }
  uint64_t busy_now_ns() const;

 private:
  void on_prepare();
  void report_trace(uint64_t busy_ns, uint64_t cpu_ns, uint64_t began_ns, const std::vector<SlowCall::Noted>& noted) const;

  UvHandle<uv_prepare_t> prepare_;  // runs once per iteration, right before polling
  uv_loop_t* loop_;
  uint64_t last_ns_ = 0;
  uint64_t last_idle_ns_ = 0;
  uint64_t last_cpu_ns_ = 0;
  uint64_t worst_ns_ = 0;
  uint64_t worst_cpu_ns_ = 0;
  uint64_t iterations_ = 0;
  uint64_t trace_ns_ = 0;  // 0: no trace
  TraceReporter trace_reporter_ = nullptr;
};

}  // namespace motor::reactor
