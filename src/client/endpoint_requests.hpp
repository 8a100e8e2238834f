// `motor exec-remote`: one caller request, served on a runner connection of its own. exec.run
// and workspace.prepare name the caller's checkout by its path (`workspace_key`): the endpoint
// snapshots it and syncs it to the runner first (workspace_sync.hpp, with the fingerprint's fast
// path), then relays the runner's answer. Every other method is relayed as it is. docs/exec-remote.md.
#pragma once

#include "client/caller_frames.hpp"
#include "client/runner_link.hpp"
#include "protocol/messages.hpp"

namespace motor::client {

// Serves `request` to its end: every frame the caller gets for it goes to `out`.
void serve_request(CallerOutput& out, RunnerLink& link, const protocol::Request& request);

}  // namespace motor::client
