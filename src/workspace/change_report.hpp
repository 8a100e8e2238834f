// What a job changed in its workspace, from `git status --porcelain=v1 -z` run against the
// prepared tree (the runner's own index of it), and the state of a `.git` the job may have made.
// Pure: parsing and encoding only, so it is unit-tested without git.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace motor::workspace {

// Bounds that keep a terminal record well inside one 1 MiB frame.
inline constexpr size_t kMaxChangedPaths = 2000;
inline constexpr size_t kMaxChangedPathBytes = 256 * 1024;
inline constexpr size_t kMaxUntrackedListed = 100;
inline constexpr size_t kMaxIgnoredSamples = 20;
inline constexpr size_t kMaxIgnoredDirs = 10000;

struct GitState {
  bool present = false;  // the workspace has a .git
  std::optional<std::string> head, ref, index_tree;
  int64_t stash_count = 0;
  bool operator==(const GitState&) const = default;
};

struct ChangeReport {
  std::vector<std::string> changes;    // tracked paths modified or deleted, and new paths
  bool changes_truncated = false;
  std::vector<std::string> untracked;  // new, not ignored (at most kMaxUntrackedListed)
  bool untracked_truncated = false;
  int64_t ignored_count = 0;           // ignored entries outside target/, node_modules/, dist/
  std::vector<std::string> ignored_samples;
  // Directories git reported ignored as a whole ("!! d/", build outputs too), without the '/':
  // git did not enter them, so nothing in them is part of the report (at most kMaxIgnoredDirs).
  std::vector<std::string> ignored_dirs;
  GitState git;
};

// The scan's output: the status entries (NUL-terminated "XY path"), then kGitStateMarker and
// "key=value" lines of the job's .git (or "absent").
inline constexpr std::string_view kGitStateMarker = "\nMOTOR-GIT-STATE\n";
std::optional<ChangeReport> parse_scan_output(std::string_view output);

// The terminal record's workspace fields. `before` is the .git state the job started with
// (git_state_changed holds equal before/after values when nothing in it changed).
protocol::WorkspaceReportJson encode_report(const ChangeReport& report, const GitState& before);

}  // namespace motor::workspace
