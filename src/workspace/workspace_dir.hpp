// Where a caller's workspace lives on the host, and the checks that keep one caller's key from
// ever naming a path outside that caller's own directory.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::workspace {

// A workspace key: 1 to 128 bytes of letters, digits, '-', '_', '.', not starting with '.',
// so it is one path component and never "..". Refusal code: workspace_key_rejected.
Status validate_workspace_key(std::string_view key);

// Turns the request's cwd into a path relative to the workspace root: an absolute cwd must lie
// under repository_root (the caller's view of the checkout); no component may be "..".
Expected<std::string> relative_cwd(std::string_view repository_root, std::string_view cwd);

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
