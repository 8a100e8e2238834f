// The caller's side of workspace.prepare: a synthetic commit of the checkout as it is on disk
// (tracked files as they are, untracked files that are not ignored), a Git bundle of only what
// the runner lacks, sent in chunks. The caller's index, refs and stash are never touched: the
// commit is built with a private index (GIT_INDEX_FILE) and its objects go to a private cache
// repository (GIT_OBJECT_DIRECTORY) under $XDG_CACHE_HOME/motor, which borrows the checkout's
// objects through alternates. docs/workspaces.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/checkout_locate.hpp"
#include "client/connection.hpp"
#include "client/prepare_reply.hpp"
#include "motor/expected.hpp"

namespace motor::client {

struct PrepareRequest {
  std::string key;              // the workspace key (a caller's path is one too: the runner maps it)
  std::string repository_root;  // "" = the checkout's root
  std::vector<std::string> siblings;
  bool progress = false;        // show bytes and rate on stderr while the bundle is sent
  // An untrusted prepare: the runner screens the change from this revision's tree before the
  // checkout (docs/change-screen.md).
  std::optional<std::string> untrusted_base;
};

// Builds the synthetic commit and bundle and runs workspace.prepare on `conn`. Errors are local
// (git failed, the connection broke: code "transfer_interrupted") or the runner's refusal of the
// connection.
Expected<PrepareOutcome> prepare_workspace(Connection& conn, const Checkout& checkout, const PrepareRequest& request);

}  // namespace motor::client
