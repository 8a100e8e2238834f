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

#include <cstdint>

#include "reactor/stall_meter.hpp"

namespace motor::reactor {

class IterationBudget {
 public:
  // Reads the iterations and their busy time from `meter` (which must outlive this). `budget_us`
  // 0: no budget, every step runs at once.
  IterationBudget(const StallMeter& meter, uint64_t budget_us);
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
  // Starts the counts afresh once the meter has begun another iteration.
  void follow_iteration();

  const StallMeter& meter_;
  uint64_t budget_ns_;
  uint64_t iteration_ = 0;  // the meter's iteration the counts are of
  uint64_t steps_ = 0;      // steps taken in it
  uint64_t left_ = 0;       // steps left for later in it
  bool starved_ = false;    // the iteration before it left a step and took none
  uint64_t deferred_ = 0;
};

}  // namespace motor::reactor
