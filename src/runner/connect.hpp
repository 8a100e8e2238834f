// `motor-runner connect`: bridges stdin/stdout to the runner's socket, for
// `ssh host motor-runner connect` behind an authorized_keys forced command naming the caller.
#pragma once

#include <optional>
#include <string>

namespace motor::runner {

// Returns the process exit code.
int run_connect_bridge(const std::string& socket_path, const std::optional<std::string>& caller);

}  // namespace motor::runner
