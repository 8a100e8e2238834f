// git as a child process of the client, its output collected (workspace sync, `motor screen`).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "motor/expected.hpp"

namespace motor::client {

struct GitRun {
  int status = -1;
  std::string out, err;
  pid_t pid = -1;  // a call started without waiting
  bool timed_out = false;  // GitIo::timeout_ms passed: git (and its children) were killed
};

// What a git call reads and where its output goes (default: nothing in, stdout collected).
struct GitIo {
  std::string input;  // written to its stdin (small: it must fit the pipe buffer)
  int out_fd = -1;    // >= 0: its stdout goes there instead of being collected
  bool wait = true;   // false: start it and return; `pid` in the result, wait with reap()
  int timeout_ms = -1;  // > 0: git runs in its own process group, killed whole after this long
};

// Runs git with the caller's environment plus `extra`; collects stdout and stderr.
Expected<GitRun> git(const std::vector<std::string>& args, const std::vector<std::string>& extra = {},
                     const GitIo& io = {});

// Waits for a git started with GitIo::wait = false.
void reap(pid_t pid);

}  // namespace motor::client
