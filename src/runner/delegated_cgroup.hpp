// Job cgroups inside the unit's own subtree when systemd delegates one (Delegate=yes) on a pure
// cgroup v2 host: the runner moves itself into a leaf (`supervisor`) of its unit's cgroup, so
// that the unit's cgroup may enable controllers for its children, and the jobs' parent becomes
// <unit cgroup>/<cgroup_parent>. On hybrid and v1 hosts, where systemd owns no controller for the
// unit, and without delegation, nothing changes: the jobs stay under cgroup_parent at the root.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::runner {

// The cgroup v2 path of this process from /proc/self/cgroup's "0::PATH" line ("" when absent).
std::string unified_cgroup_path(std::string_view proc_self_cgroup);

// When delegated: moves this process into <own>/supervisor, enables the controllers jobs need
// in <own>, and returns the cgroup parent to use (<own without the leading '/'>/<cgroup_parent>).
// nullopt when not delegated (the caller keeps cgroup_parent); an error when delegated but the
// move failed.
Expected<std::optional<std::string>> enter_delegated_cgroup(const std::string& cgroup_parent);

}  // namespace motor::runner
