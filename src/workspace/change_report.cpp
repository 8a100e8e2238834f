#include "workspace/change_report.hpp"

#include "protocol/json_writer.hpp"

namespace motor::workspace {
namespace {

// Build outputs whose writes are expected and not worth reporting.
bool in_build_output(std::string_view path) {
  for (std::string_view dir : {"target/", "node_modules/", "dist/"}) {
    if (path.starts_with(dir) || path == dir.substr(0, dir.size() - 1)) return true;
  }
  return false;
}

std::optional<std::string> nonempty(std::string_view v) {
  if (v.empty()) return std::nullopt;
  return std::string(v);
}

void write_optional(protocol::JsonWriter& w, std::string_view key, const std::optional<std::string>& v) {
  if (v) w.field(key, *v);
  else w.field_null(key);
}

}  // namespace

std::optional<ChangeReport> parse_scan_output(std::string_view output) {
  const auto marker = output.find(kGitStateMarker);
  if (marker == std::string_view::npos) return std::nullopt;
  ChangeReport r;
  size_t changed_bytes = 0;
  std::string_view status = output.substr(0, marker);
  while (!status.empty()) {
    const auto end = status.find('\0');
    if (end == std::string_view::npos || end < 4 || status[2] != ' ') return std::nullopt;
    const std::string_view xy = status.substr(0, 2);
    const std::string_view path = status.substr(3, end - 3);
    status.remove_prefix(end + 1);
    if (xy == "!!") {
      if (path.size() > 1 && path.ends_with('/') && r.ignored_dirs.size() < kMaxIgnoredDirs) {
        r.ignored_dirs.emplace_back(path.substr(0, path.size() - 1));
      }
      if (in_build_output(path)) continue;
      ++r.ignored_count;
      if (r.ignored_samples.size() < kMaxIgnoredSamples) r.ignored_samples.emplace_back(path);
      continue;
    }
    if (xy == "??") {
      if (r.untracked.size() < kMaxUntrackedListed) r.untracked.emplace_back(path);
      else r.untracked_truncated = true;
    }
    if (r.changes.size() < kMaxChangedPaths && changed_bytes + path.size() < kMaxChangedPathBytes) {
      r.changes.emplace_back(path);
      changed_bytes += path.size();
    } else {
      r.changes_truncated = true;
    }
  }
  std::string_view state = output.substr(marker + kGitStateMarker.size());
  while (!state.empty()) {
    const auto nl = state.find('\n');
    const std::string_view line = state.substr(0, nl);
    state.remove_prefix(nl == std::string_view::npos ? state.size() : nl + 1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "present") r.git.present = value == "1";
    else if (key == "head") r.git.head = nonempty(value);
    else if (key == "ref") r.git.ref = nonempty(value);
    else if (key == "index_tree") r.git.index_tree = nonempty(value);
    else if (key == "stash_count") {
      int64_t n = 0;
      for (char c : value) {
        if (c < '0' || c > '9' || n > 1000000000) break;
        n = n * 10 + (c - '0');
      }
      r.git.stash_count = n;
    }
  }
  return r;
}

protocol::WorkspaceReportJson encode_report(const ChangeReport& r, const GitState& before) {
  protocol::WorkspaceReportJson out;
  {
    protocol::JsonWriter w;
    w.begin_array();
    for (const auto& p : r.changes) w.string(p);
    out.changes = w.end_array().take();
  }
  out.changes_truncated = r.changes_truncated;
  {
    protocol::JsonWriter w;
    w.begin_object().key("paths").begin_array();
    for (const auto& p : r.untracked) w.string(p);
    out.untracked_files = w.end_array().field("truncated", r.untracked_truncated).end_object().take();
  }
  {
    protocol::JsonWriter w;
    w.begin_object().field("count", r.ignored_count).key("sample_paths").begin_array();
    for (const auto& p : r.ignored_samples) w.string(p);
    out.ignored_writes = w.end_array().end_object().take();
  }
  // Reported even when nothing changed (equal before/after values): null would mean "not
  // reported" to an exec-remote/v1 caller.
  {
    protocol::JsonWriter w;
    w.begin_object();
    write_optional(w, "head_before", before.head);
    write_optional(w, "head_after", r.git.head);
    write_optional(w, "ref_before", before.ref);
    write_optional(w, "ref_after", r.git.ref);
    write_optional(w, "index_tree_before", before.index_tree);
    write_optional(w, "index_tree_after", r.git.index_tree);
    w.field("stash_count_before", before.stash_count).field("stash_count_after", r.git.stash_count);
    out.git_state_changed = w.end_object().take();
  }
  return out;
}

}  // namespace motor::workspace
