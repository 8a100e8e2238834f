// Opaque on-disk names of workspaces (issue 15: what a job sees in /proc/self/mountinfo).
//
// A job's /workspace is a bind of a directory below the workspace root, and the kernel shows
// that directory's path within its filesystem as the bind's root field in mountinfo (whatever
// path it was bound from). So the directory's name says nothing: it is a keyed hash of the caller
// and the key (SipHash-2-4 under a secret only root reads, <root>/.name-key), 32 hex digits.
// Keyed, so a job cannot confirm a guess of its caller or key from the name it sees.
//
// Layout under the workspace root (root-owned 0711):
//   <id>/                     a workspace, the job account's, 0700
//   .name-key                 the secret (16 random bytes), root 0600
//   .keys/<caller>/<name>     which keys a caller has (workspace.list), root 0700: <name> is
//                             workspace_key_file_name(key) (a path key's is a hash) and the
//                             file holds the key
// Names starting with '.' are never a caller, key or id. The layout before this one,
// <root>/<caller>/<key>, is moved to it at start (migrate_legacy_workspace_dirs).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::workspace {

using SipKey = std::array<uint8_t, 16>;

// SipHash-2-4 (Aumasson, Bernstein): a keyed pseudo-random function with a 64-bit output.
uint64_t siphash24(const SipKey& key, std::string_view data);

// The directory name of (caller, key) below `root`, creating the root and its secret on first
// use. Test build only ("workspace-names" weakened): "<caller>/<key>", the old layout.
Expected<std::string> workspace_dir_name(const std::string& root, std::string_view caller, std::string_view key);
// root + "/" + workspace_dir_name(...).
Expected<std::string> workspace_dir_path(const std::string& root, std::string_view caller, std::string_view key);

// The index workspace.list reads: a caller's keys that have (or had) a directory.
Status note_workspace_key(const std::string& root, const std::string& caller, const std::string& key);
// `path` as a real directory (never a symlink) owned by uid:gid with exactly `mode`: made if
// missing, its owner and mode set if they differ.
Status ensure_owned_dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid);
void forget_workspace_key(const std::string& root, const std::string& caller, const std::string& key);
std::vector<std::string> noted_workspace_keys(const std::string& root, const std::string& caller);
// The key the file at `path`, named `name` (or `name` plus a suffix), stands for
// (workspace_key_file_name): a short key is its name; a path key is read from the file and must
// hash to the name. nullopt: no key's file.
std::optional<std::string> key_of_file(const std::string& path, std::string_view name);

// Moves each <root>/<caller>/<key> (a root-owned caller directory: the layout before opaque
// names) to <root>/<id> and notes the key; an id that already exists is left alone and named in
// `problems`. Start-up only, before any job runs. Returns how many workspaces moved.
Expected<int> migrate_legacy_workspace_dirs(const std::string& root, std::vector<std::string>& problems);

}  // namespace motor::workspace
