// The CPU scheduling policy of Motor's helpers. SCHED_BATCH takes nothing from a thread's share of
// the CPU; it only stops the thread's wake-ups from preempting the thread that is running. The
// runner's loop wakes its helpers (the state writer, the job starter, its pool threads) several
// times per job; under SCHED_OTHER each woken helper took the CPU from the loop at once, in the
// middle of the loop's iteration, and a burst of 20 starts on 2 cores stalled it for 1-2 ms more
// than its own work (perf sched: most of the loop's off-CPU time, preemptions at syscall exit by
// motor-state and the pool's threads). Batch helpers run when the loop waits or on another core.
#pragma once

#include <functional>

#include "motor/expected.hpp"

namespace motor {

// The calling thread (only it: Linux keeps the policy per thread) becomes SCHED_BATCH, nice kept.
Status make_this_thread_batch();

// Runs `while_batch` with the calling thread SCHED_BATCH, then gives the thread the policy it had
// (whatever it was): for threads made meanwhile, which take their creator's policy.
Status with_this_thread_batch(const std::function<Status()>& while_batch);

}  // namespace motor
