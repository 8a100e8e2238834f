// Shared pieces of the cgroup drivers (cgroup_v2.cpp, cgroup_v1.cpp, cgroup_detect.cpp).
// Not part of the sandbox interface: include "sandbox/cgroup.hpp" instead.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/cgroup.hpp"

namespace motor::sandbox::cgroup_detail {

// ---- small file helpers (every error names the path and errno) ----

// Reads a (small) cgroup control file whole.
Expected<std::string> read_text(const std::string& path);
// Writes `value` to a control file in one write(2), as the kernel expects.
Status write_text(const std::string& path, std::string_view value);
bool exists(const std::string& path);
// mkdir; returns true if this call created the directory, false if it existed already.
Expected<bool> make_dir(const std::string& path);
// rmdir; ENOENT counts as success; EBUSY is retried for a short, bounded time.
Status remove_dir(const std::string& path);
// Names of the subdirectories of `dir` (empty if it cannot be read).
std::vector<std::string> list_subdirs(const std::string& dir);
Expected<UniqueFd> open_dir(const std::string& path);
Expected<UniqueFd> open_write(const std::string& path);

// The value N of a "key N" line in a flat-keyed file (cgroup.events, memory.events,
// memory.oom_control, pids.events).
std::optional<int64_t> keyed_value(std::string_view text, std::string_view key);
// Words of a space-separated list (cgroup.controllers, cgroup.subtree_control).
std::vector<std::string> words(std::string_view text);
// Strips trailing whitespace and newlines.
std::string trim(std::string text);
// Pids listed in a cgroup.procs file.
Expected<std::vector<pid_t>> read_pids(const std::string& procs_path);

// A job or parent name: one path component, no dot files, printable.
bool valid_name(const std::string& name);

// ---- the cgroup v2 primitives, shared by the v2 driver and the hybrid layout ----

// "populated" of <dir>/cgroup.events.
Expected<bool> v2_populated(const std::string& dir);
// Writes "1" to <dir>/cgroup.kill.
Status v2_kill(const std::string& dir);

// ---- driver factories (detect_cgroups picks one) ----

// `mount` is the cgroup2 mount point; controllers are enabled in our parent's subtree.
Expected<std::unique_ptr<CgroupDriver>> make_v2_driver(const std::string& mount, const std::string& parent);

// One v1 hierarchy: its mount point and the controllers bound to it.
struct V1Hierarchy {
  std::string mount;
  std::vector<std::string> controllers;
};

// Pure v1 when `unified_mount` is empty (attach through child_attach_fds, freeze-and-kill),
// otherwise hybrid (limits on v1, clone3/kill/events on the unified cgroup2 mount).
// `by_controller` maps "memory", "pids", "cpuset" (and "freezer" for pure v1) to hierarchies.
Expected<std::unique_ptr<CgroupDriver>> make_v1_driver(const std::map<std::string, V1Hierarchy>& by_controller,
                                                      const std::string& unified_mount,
                                                      const std::string& parent);

}  // namespace motor::sandbox::cgroup_detail
