// A loop iteration's budget for its heavy steps: a job's start, a job's end (its sandbox's exit),
// the job starter's answer, a client's request. Each such step begins with `defer()`: once the
// iteration (as the stall meter counts it, poll to poll) has run one step and been busy for the
// budget, the rest wait for the next iterations instead of lengthening this one. An iteration
// busy for the budget with other work (output, a job's records, a save) leaves its first step
// too, unless the iteration before it left one and took none: at least every other iteration
// takes a step while steps wait, so nothing starves. A step waits where it is: a
// level-triggered fd left unread stays ready (the next poll returns at once), an idle handle
// stays active. No step is lost or reordered among its own kind. One budget per loop thread
// (the runner's). A job's end (LinuxExecution::maybe_end) is a step too.
#pragma once

#include <uv.h>

#include <cstdint>

#include "reactor/uv_handle.hpp"

namespace motor::reactor {

class IterationBudget {
 public:
  // Enables libuv's idle-time metric (as StallMeter does). `budget_us` 0: no budget, every step
  // runs at once. Without its prepare handle there is no budget either.
  IterationBudget(uv_loop_t* loop, uint64_t budget_us);
  ~IterationBudget();
  IterationBudget(const IterationBudget&) = delete;
  IterationBudget& operator=(const IterationBudget&) = delete;

  // True: this thread's loop iteration has taken a step and spent its budget, so the caller
  // leaves its step for a later iteration. False: the caller takes its step now (counted).
  // Always false on a thread without a budget.
  static bool defer();
  // The same question without taking a step: would the next one wait?
  static bool exhausted();
  // Steps left for a later iteration so far (a diagnostic and the tests' witness).
  static uint64_t deferred_total();

 private:
  bool spent();
  void on_prepare();

  uv_loop_t* loop_;
  uint64_t budget_ns_;
  uint64_t mark_ns_ = 0;       // the last prepare (right before the poll)
  uint64_t mark_idle_ns_ = 0;  // libuv's idle time then
  uint64_t steps_ = 0;         // steps taken since
  uint64_t left_ = 0;          // steps left for later since
  bool starved_ = false;       // the iteration before left a step and took none
  uint64_t deferred_ = 0;
  UvHandle<uv_prepare_t> prepare_;
};

}  // namespace motor::reactor
