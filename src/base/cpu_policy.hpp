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

// The calling thread (only it: Linux keeps the policy per thread) becomes SCHED_BATCH, nice kept
// (and its reset-on-fork flag, below).
Status make_this_thread_batch();

// SCHED_FLAG_RESET_ON_FORK on the calling thread, its policy and nice kept: the threads and
// processes it makes afterwards start at nice 0 when its own nice is negative. The runner's
// systemd unit gives it Nice=-5, so that its loop is not preempted mid-iteration by the jobs'
// sandboxes being built beside it; its helpers and the jobs they start do not inherit that.
Status reset_nice_on_fork();

// Runs `while_batch` with the calling thread SCHED_BATCH, then gives the thread the policy it had
// (whatever it was): for threads made meanwhile, which take their creator's policy.
Status with_this_thread_batch(const std::function<Status()>& while_batch);

}  // namespace motor
