// Runs a blocking call on libuv's thread pool and its result back on the loop: for the kernel
// calls that can take milliseconds (a cgroup.kill write that signals every task of a job) and
// must not stall the loop. `work` runs on a pool thread and must touch nothing the loop owns;
// `done` runs on the loop afterwards (also when the loop cancelled the work: then `work` did
// not run).
#pragma once

#include <uv.h>

#include <functional>

#include "motor/expected.hpp"

namespace motor::reactor {

// Fails only if libuv refuses the work; neither function has run then.
Status run_on_pool(uv_loop_t* loop, std::function<void()> work, std::function<void()> done);

// Makes libuv's pool threads now, SCHED_BATCH (base/cpu_policy.hpp): the loop wakes one for every
// piece of work, and a woken SCHED_OTHER thread took the CPU from the loop at once. A new thread
// takes its creator's policy, so the calling thread is batch while libuv makes them, then has its
// own policy back. Call it before any other work reaches the pool (later it changes nothing).
Status start_pool_threads_as_batch();

}  // namespace motor::reactor
