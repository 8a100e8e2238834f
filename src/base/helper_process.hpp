// The first steps of a helper process forked from the runner (the state writer, the job
// starter): it dies with the runner, carries a name of its own, and nothing of the runner's
// loop reaches it.
#pragma once

#include <sys/types.h>

#include <functional>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor {

struct HelperProcess {
  pid_t pid = -1;
  UniqueFd channel;  // the runner's end of a close-on-exec AF_UNIX stream socketpair
};

// Forks a helper named `name`: in the child, become_helper_process() and then `main(fd)` on
// its end of the channel (fd 3); `main` never returns (it _exits).
Expected<HelperProcess> fork_helper_process(const char* name, const std::function<void(int)>& main);

// In the forked child: PR_SET_PDEATHSIG (and exits at once if `runner` is already gone),
// PR_SET_NAME, SCHED_BATCH (base/cpu_policy.hpp), default signal handling with nothing blocked
// (libuv's handlers would write into the runner's own signal pipe), `channel` moved to fd 3 and
// every fd above it closed (stdio, the runner's log, stays). Returns 3.
int become_helper_process(int channel, const char* name, pid_t runner);

}  // namespace motor
