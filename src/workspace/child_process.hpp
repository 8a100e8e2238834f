// Git and the workspace sandbox run as children watched on the loop (reactor/child_process), so
// no git call ever blocks the runner's loop. This is the workspace's fire-and-forget form of it:
// nothing owns the child, the callback always runs once.
#pragma once

#include <uv.h>

#include <functional>
#include <string>

#include "reactor/child_process.hpp"

namespace motor::workspace {

using ChildSpec = reactor::ChildSpec;

struct ChildResult : reactor::ChildExit {
  std::string spawn_error;  // it could not be started
  // Exited 0 in time (callers that parse `out` also check stdout_truncated).
  bool ok() const { return spawn_error.empty() && exit_code == 0 && !timed_out; }
  // One line for logs and refusal details.
  std::string describe() const { return spawn_error.empty() ? ChildExit::describe() : "could not start: " + spawn_error; }
};

// Starts the child; `done` runs on the loop once it has exited and its pipes are drained (at
// once when it could not be started).
void run_child(uv_loop_t* loop, ChildSpec spec, std::function<void(ChildResult)> done);

}  // namespace motor::workspace
