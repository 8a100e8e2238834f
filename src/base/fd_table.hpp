// The process's file descriptor table, grown once up front. The kernel grows the table when a
// descriptor past its end is made, and a process with more than one thread then waits for an RCU
// grace period (expand_fdtable's synchronize_rcu), milliseconds to tens of them on a loaded host:
// on the runner's loop, the first burst of simultaneous jobs paid it. Grown while the process has
// one thread, the table never needs growing again below `count` (it never shrinks).
#pragma once

#include <cstddef>

namespace motor {

// Grows the table to hold at least min(count, RLIMIT_NOFILE) descriptors; the size reached (0 if
// it could not).
std::size_t reserve_fd_table(std::size_t count);

}  // namespace motor
