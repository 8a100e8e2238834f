// What the files of Workspaces (workspaces*.cpp, one concern each) share; not for other modules.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "workspace/workspaces.hpp"

namespace motor::workspace {

// A bundle upload in progress (workspace.prepare until workspace.finish).
struct Workspaces::Transfer {
  std::string id, caller, key, repository_root, tree;
  std::string screen_base;  // untrusted: the change is screened from this commit before the checkout
  uint64_t session = 0;
  std::string path;  // the bundle as uploaded so far
  UniqueFd fd;
  int64_t received = 0;
  uint64_t last_activity_ms = 0;
};

}  // namespace motor::workspace

namespace motor::workspace::detail {

// Raw bundle bytes per workspace.upload: base64 of this is ~683 KiB, well inside a 1 MiB frame.
inline constexpr size_t kChunkBytes = 512 * 1024;
inline constexpr uint64_t kMirrorTimeoutMs = 600000;
inline constexpr uint64_t kCheckoutTimeoutMs = 900000;
inline constexpr uint64_t kScanTimeoutMs = 300000;
// Ref the client's bundle carries (docs/protocol.md "Workspaces").
inline constexpr const char* kBundleRef = "refs/motor/synthetic";

int64_t now_ms();
// The in-memory key of (caller, key): "<caller>/<key>". A caller name holds no '/', so the first
// '/' splits it even when the key is a path.
std::string id_key(const std::string& caller, const std::string& key);
// A stable directory name for a repository root.
std::string path_hash(std::string_view s);
// {"type":"refused_before_start","reason":R}
std::string refusal_json(const std::string& reason);

}  // namespace motor::workspace::detail
