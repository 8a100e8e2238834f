// What a VM job changed in its workspace copy, from a listing made inside the guest (the guest
// runner snapshots the copy before and after the command; docs/windows-jobs.md "The guest
// runner"). The host never reads the data disk, so this listing is all it has, and the guest is
// untrusted: the listing is bounded in bytes (by the reader) and in entries, and every entry is
// validated before any of it is believed. Pure: parsing and encoding only.
//
// The listing, UTF-8 text, one entry a line:
//
//   motor-changes 1
//   M path/of/a/modified/file
//   A path/of/a/new/file
//   D path/of/a/deleted/file
//   end
//
// Paths are relative to the workspace copy's root, '/'-separated, sorted or not, each at most once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/messages.hpp"

namespace motor::vm {

// The most the host reads of a listing, and the most entries it accepts. Anything beyond is not
// truncated but refused: a partial listing would silently hide changes.
inline constexpr size_t kMaxListingBytes = 1 << 20;
inline constexpr size_t kMaxListingEntries = 20000;
inline constexpr size_t kMaxListedPathBytes = 4096;
inline constexpr size_t kMaxListedNameBytes = 255;
// What the terminal record carries (the same bounds as a Linux job's report).
inline constexpr size_t kMaxReportedPaths = 2000;
inline constexpr size_t kMaxReportedPathBytes = 256 * 1024;
inline constexpr size_t kMaxReportedNew = 100;

struct GuestChange {
  enum class Kind { kModified, kAdded, kDeleted };
  Kind kind = Kind::kModified;
  std::string path;
  bool operator==(const GuestChange&) const = default;
};

// Why a path is refused, or nothing: relative, '/'-separated, no empty, "." or ".." component,
// no backslash, no control character (NUL included), valid UTF-8, within the length limits.
Status validate_listed_path(std::string_view path);

// The whole listing, or why it is not believed (the reason is logged; the report is then null).
Expected<std::vector<GuestChange>> parse_guest_changes(std::string_view listing);

// The terminal record's workspace fields: workspace_changes (every path, sorted, bounded as a
// Linux job's), untracked_files (the new paths), ignored_writes and git_state_changed null (the
// guest knows no .gitignore and has no .git of the runner's).
protocol::WorkspaceReportJson encode_guest_changes(std::vector<GuestChange> changes);

}  // namespace motor::vm
