// `motor exec-remote (--stdio | --listen SOCKET)`: the caller's side of exec-remote/v1 on the
// caller's machine (docs/exec-remote.md). A caller that speaks the vocabulary, and links no code
// of Motor's, sends its requests here; the endpoint snapshots and syncs each checkout to the
// runner (--socket, or --host ssh://...) and relays the runner's answers.
#pragma once

#include "client/cli.hpp"

namespace motor::client {

// --stdio: one caller on stdin/stdout, until stdin ends. --listen: a Unix socket (0600, this
// account's callers only) until SIGTERM or SIGINT. Returns the exit status.
int run_exec_remote(const CliOptions& options);

}  // namespace motor::client
