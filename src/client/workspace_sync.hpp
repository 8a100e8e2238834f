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

#include "client/connection.hpp"
#include "motor/expected.hpp"

namespace motor::client {

struct Checkout {
  std::string root;     // the top of the work tree (git rev-parse --show-toplevel)
  std::string rel_cwd;  // the directory the command runs in, relative to root ("" = root)
  std::string objects_dir, index_path;  // the checkout's object store and index (absolute)
};

// The Git checkout `dir` is in; an error (code "not_a_checkout") when it is in none.
Expected<Checkout> find_checkout(const std::string& dir);

// A workspace key for a checkout when none is given: its directory name (made safe) and a
// short hash of its path, e.g. "motor-3f2a9c1e".
std::string derive_workspace_key(const std::string& root);

struct PrepareOutcome {
  bool prepared = false;
  std::string reason, detail;  // a refusal
  bool transient = false;
  int64_t bundle_bytes = 0;
  std::string tree_hash;
  int64_t fetch_ms = 0, checkout_ms = 0;  // the runner's two steps
  std::string raw;             // the final reply as received
};

// Builds the synthetic commit and bundle and runs workspace.prepare on `conn`. `progress`:
// show bytes and rate on stderr while the bundle is sent. Errors are local (git failed, the
// connection broke: code "transfer_interrupted"). `untrusted_base`: an untrusted prepare; the
// runner screens the change from this revision's tree before the checkout (docs/change-screen.md).
Expected<PrepareOutcome> prepare_workspace(Connection& conn, const Checkout& checkout, const std::string& key,
                                           bool progress, const std::optional<std::string>& untrusted_base = std::nullopt);

}  // namespace motor::client
