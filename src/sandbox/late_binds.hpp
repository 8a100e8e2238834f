// Binds put into a sandbox that was built ahead of its job (runner/sandbox_pool.hpp): the job's
// workspace, at the mount point the sandbox was built with (SandboxConfig::workspace_later), and
// a host /tmp (motor-bb-runner's) over its tmpfs, before its command runs.
//
//   parent:  late_binds(built, job)           which binds turn `built` into the job's sandbox, or why it cannot
//   helper:  mount_late_binds(mount_ns, ...)  each source captured on the host as a detached copy
//            of its tree (open_tree), then attached inside the sandbox's mount namespace (setns)
//
// The helper must be single-threaded and hold CAP_SYS_ADMIN and CAP_SYS_CHROOT (setns into a mount
// namespace wants both): the job starter's helper process (job_starter.hpp), never the loop.
// Sources are opened as the plan's binds are: no symlink in any component, a directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "sandbox/sandbox_config.hpp"

namespace motor::sandbox {

struct LateBind {
  std::string source;    // host directory
  std::string target;    // inside the sandbox: a directory there already (its mount point, or /tmp)
  uint64_t attr_set = 0; // MOUNT_ATTR_*, applied recursively, as the plan's bind would have
  bool operator==(const LateBind&) const = default;
};

// `built`: what the waiting sandbox was built from (workspace_later, a tmpfs /tmp).
// The binds that make it `job`'s sandbox; an error when the two differ in anything else (the
// job's own sandbox is then built for it, as without a pool).
Expected<std::vector<LateBind>> late_binds(const SandboxConfig& built, const SandboxConfig& job);

// In the helper: attaches `binds` inside the mount namespace `mount_ns` (an nsfs fd), then
// returns to the caller's own namespace (root and working directory as setns leaves them: the
// namespace's root). 0 or an errno, with `stage` naming the step. `stranded`: the way back
// failed, and the caller is still in the sandbox's namespace (it must exit).
int mount_late_binds(int mount_ns, const std::vector<LateBind>& binds, const char*& stage, bool& stranded);

}  // namespace motor::sandbox
