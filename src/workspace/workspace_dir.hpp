// Where a caller's workspace lives on the host, and the checks that keep one caller's key from
// ever naming a path outside that caller's own directory.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::workspace {

// A workspace key is either Motor's short key, 1 to 128 bytes of letters, digits, '-', '_', '.',
// not starting with '.', or what exec-remote/v1 callers send: the canonical absolute path of the
// checkout on the caller's machine (at most 4,096 bytes; no empty, "." or ".." component, no
// trailing '/', no control character). A path key is never used as a path on the runner: every
// on-disk name comes from workspace_key_file_name(). Refusal code: workspace_key_rejected.
Status validate_workspace_key(std::string_view key);
// A valid key that is a caller's path (starts with '/').
bool is_path_key(std::string_view key);
// One path component naming a valid key on disk (a marker, a record, the runner's git dir, a
// sibling's mount point): a short key is itself; a path key is '~' and 40 hex digits of its
// SHA-256 ('~' is never in a short key, so the two never meet). Where the key must be read back
// from a name, the file holds the key (workspace_names.hpp).
std::string workspace_key_file_name(std::string_view key);
// Is `name` an on-disk name workspace_key_file_name() makes (either form; of a path key)?
bool is_workspace_key_file_name(std::string_view name);
bool is_path_key_file_name(std::string_view name);
// The key an on-disk `name` stands for, given the key its file holds: a short key's name is the
// key; a path key's hashed name must be the hash of `key_in_file`. nullopt: no key's name.
std::optional<std::string> key_named(std::string_view name, std::string_view key_in_file);

// Turns the request's cwd into a path relative to the workspace root: an absolute cwd must lie
// under `checkout` (the caller's path of the workspace: a path workspace_key itself, else
// repository_root, which `checkout_field` names in the error); no component may be "..".
Expected<std::string> relative_cwd(std::string_view checkout, std::string_view cwd,
                                   std::string_view checkout_field = "repository_root");
// The caller's path of the workspace a job's absolute cwd is relative to (see relative_cwd).
inline std::string_view cwd_checkout(std::string_view workspace_key, std::string_view repository_root) {
  return is_path_key(workspace_key) ? workspace_key : repository_root;
}

// Is `rel` (from relative_cwd) a directory inside `workspace`, reached without any symlink
// (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)? The path comes from a
// request and the workspace from a job: a plain stat() as root would follow a symlink the job
// planted and answer differently for existing and missing host directories. Every failure gives
// the same answer.
Status check_dir_beneath(const std::string& workspace, const std::string& rel);

// Creates (if missing) the workspace of (caller, key): <root>/<opaque id> (workspace_names.hpp),
// owned by the job account, mode 0700, and notes the key for workspace.list; the root is
// root-owned 0711 so jobs can reach their own workspace and list nothing.
Expected<std::string> ensure_workspace_dir(const std::string& root, const std::string& caller, const std::string& key,
                                           uid_t owner_uid, gid_t owner_gid);

}  // namespace motor::workspace
