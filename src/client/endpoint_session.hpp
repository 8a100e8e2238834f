// One caller of `motor exec-remote`: its frames in on one fd, its answers out on another (stdin
// and stdout, or one accepted socket twice). Each request is served on a thread of its own with a
// runner connection of its own, so a run's stream, a cancel and a status go on side by side.
#pragma once

#include <optional>
#include <string>

#include "client/ssh_target.hpp"

namespace motor::client {

struct EndpointConfig {
  Endpoint runner;                         // where the runner is: its socket, or --host
  std::optional<std::string> ssh_command;  // $MOTOR_SSH_COMMAND
};

// Reads requests until the caller's end closes, then waits for what is in flight (or, if the
// caller can no longer be written to, cuts it short) and returns. `stop_fd` >= 0: readable means
// the endpoint stops (its in-flight requests are cut).
void serve_caller(int in_fd, int out_fd, const EndpointConfig& config, int stop_fd = -1);

}  // namespace motor::client
