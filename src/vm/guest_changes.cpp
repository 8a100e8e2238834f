#include "vm/guest_changes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "protocol/json_writer.hpp"

namespace motor::vm {
namespace {

constexpr std::string_view kHeader = "motor-changes 1";
constexpr std::string_view kTrailer = "end";

Error refused(std::string why) { return make_error("guest_listing", std::move(why)); }

// Length of the well-formed UTF-8 sequence at `s` (no overlongs, no surrogates, at most
// U+10FFFF), or 0.
size_t utf8_sequence(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

Status validate_listed_path(std::string_view path) {
  if (path.empty()) return refused("an empty path");
  if (path.size() > kMaxListedPathBytes) return refused(fmt::format("a path of {} bytes (at most {})", path.size(), kMaxListedPathBytes));
  if (path.front() == '/') return refused("an absolute path");
  for (size_t i = 0; i < path.size();) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7F) return refused(fmt::format("a control character (0x{:02x}) in a path", c));
    if (c == '\\') return refused("a backslash in a path (separators are '/')");
    const size_t n = utf8_sequence(path.substr(i));
    if (n == 0) return refused("a path that is not valid UTF-8");
    i += n;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty()) return refused("an empty path component");
    if (part == "." || part == "..") return refused("a \".\" or \"..\" path component");
    if (part.size() > kMaxListedNameBytes) return refused(fmt::format("a name of {} bytes (at most {})", part.size(), kMaxListedNameBytes));
    start = end + 1;
  }
  return {};
}

Expected<std::vector<GuestChange>> parse_guest_changes(std::string_view listing) {
  if (listing.size() > kMaxListingBytes) {
    return refused(fmt::format("the listing is over {} bytes", kMaxListingBytes));
  }
  std::vector<GuestChange> out;
  std::unordered_set<std::string_view> seen;
  bool header = false, trailer = false;
  size_t line_no = 0;
  while (!listing.empty()) {
    const size_t nl = listing.find('\n');
    if (nl == std::string_view::npos) return refused("the listing does not end with a newline (cut short?)");
    const std::string_view line = listing.substr(0, nl);
    listing.remove_prefix(nl + 1);
    ++line_no;
    if (trailer) return refused("lines after the listing's end");
    if (!header) {
      if (line != kHeader) return refused("the listing does not start with \"motor-changes 1\"");
      header = true;
      continue;
    }
    if (line == kTrailer) {
      trailer = true;
      continue;
    }
    if (out.size() == kMaxListingEntries) return refused(fmt::format("the listing has over {} entries", kMaxListingEntries));
    if (line.size() < 3 || line[1] != ' ') return refused(fmt::format("line {} is not \"X PATH\"", line_no));
    GuestChange change;
    switch (line[0]) {
      case 'M': change.kind = GuestChange::Kind::kModified; break;
      case 'A': change.kind = GuestChange::Kind::kAdded; break;
      case 'D': change.kind = GuestChange::Kind::kDeleted; break;
      default: return refused(fmt::format("line {}: unknown change kind", line_no));
    }
    const std::string_view path = line.substr(2);
    if (auto s = validate_listed_path(path); !s) return refused(fmt::format("line {}: {}", line_no, s.error().message));
    if (!seen.insert(path).second) return refused(fmt::format("line {}: a path listed twice", line_no));
    change.path = std::string(path);
    out.push_back(std::move(change));
  }
  if (!header) return refused("the listing is empty");
  if (!trailer) return refused("the listing has no \"end\" line (cut short?)");
  return out;
}

protocol::WorkspaceReportJson encode_guest_changes(std::vector<GuestChange> changes) {
  std::sort(changes.begin(), changes.end(), [](const GuestChange& a, const GuestChange& b) { return a.path < b.path; });
  protocol::WorkspaceReportJson out;
  protocol::JsonWriter all, added;
  all.begin_array();
  added.begin_object().key("paths").begin_array();
  size_t listed = 0, bytes = 0, new_listed = 0;
  bool new_truncated = false;
  for (const auto& c : changes) {
    if (listed < kMaxReportedPaths && bytes + c.path.size() < kMaxReportedPathBytes) {
      all.string(c.path);
      ++listed;
      bytes += c.path.size();
    } else {
      out.changes_truncated = true;
    }
    if (c.kind == GuestChange::Kind::kAdded) {
      if (new_listed < kMaxReportedNew) {
        added.string(c.path);
        ++new_listed;
      } else {
        new_truncated = true;
      }
    }
  }
  out.changes = all.end_array().take();
  out.untracked_files = added.end_array().field("truncated", new_truncated).end_object().take();
  out.ignored_writes = "null";
  out.git_state_changed = "null";
  return out;
}

}  // namespace motor::vm
