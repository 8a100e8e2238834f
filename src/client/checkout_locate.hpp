// Which Git checkout a directory is in, and the client's names for it: the workspace key derived
// from its path and the cache directory (docs/workspaces.md).
#pragma once

#include <string>

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

// $XDG_CACHE_HOME (or ~/.cache): the client's cache repositories and fingerprints.
std::string cache_base();

}  // namespace motor::client
