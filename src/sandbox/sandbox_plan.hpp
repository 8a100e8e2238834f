// The Linux job sandbox (DESIGN.md "A Linux job", issue 3), as ChildHooks for spawn_job.
//
//   auto plan = plan_sandbox(config);          // parent: validates, formats, compiles seccomp
//   ChildHooks hooks = make_child_hooks(*plan); // parent: captures the plan
//   spec.executable = kSandboxInitPath;         // motor-init is PID 1 and execs the command
//   spec.argv = init_argv(command);
//   spec.hooks = &hooks;
//
// Everything that allocates or formats happens in plan_sandbox; the hooks only make syscalls.
// A sandbox that cannot be built exactly as configured fails (plan error, or a setup-status
// failure naming the step); nothing ever falls back to a weaker one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/capabilities.hpp"
#include "sandbox/idmap.hpp"
#include "sandbox/job_network.hpp"
#include "sandbox/mounts.hpp"
#include "sandbox/namespaces.hpp"
#include "sandbox/seccomp_policy.hpp"
#include "sandbox/spawn.hpp"

namespace motor::sandbox {

// The executable the spawn names for motor-init. It is not in the job's root: the child execs
// SandboxPlan::init_fd (ChildHooks::exec_fd), a host file a bind would show by its host path in
// the job's mountinfo. Test build only ("workspace-names"): bound read-only here and exec'd by path.
inline constexpr const char* kSandboxInitPath = "/.motor/motor-init";

struct ToolchainPath {
  std::string path;       // host path, bound read-only at the same path (a symlink is recreated)
  bool optional = false;  // skipped if absent on the host; a required path that is absent fails
};

// /usr and the merged-/usr links, the loader cache, alternatives, CA certificates, a few /etc
// files: enough for cc, make, cargo (from a configured toolchain path), python3 and git.
std::vector<ToolchainPath> default_toolchain_paths();

struct BindMount {
  BindMount() = default;
  BindMount(std::string source_path, std::string target_path, std::optional<IdMap> id_map = std::nullopt)
      : source(std::move(source_path)), target(std::move(target_path)), idmap(id_map) {}
  std::string source;  // absolute host path (no symlink in any component)
  std::string target;  // absolute path inside the sandbox; empty = same as source
  // Read-only binds only: the tree shown as owned by another account (sandbox/idmap.hpp).
  // Honoured by an in-process spawn (SandboxedSpawn, DiskTool); the job starter runs such a
  // sandbox in process.
  std::optional<IdMap> idmap;
};

struct SandboxConfig {
  std::vector<ToolchainPath> toolchain = default_toolchain_paths();  // read-only, nosuid, nodev
  BindMount workspace;                // writable, nosuid, nodev; required; also the job's $HOME in passwd
  std::vector<BindMount> writable;    // more writable binds (the workspace's target dir)
  std::vector<BindMount> read_only;   // sibling workspaces, shared caches: read-only, nosuid, nodev
  uint64_t tmp_size_bytes = uint64_t{1} << 30;  // private /tmp tmpfs cap
  std::string tmp_source;             // a host directory bound writable at /tmp instead (Buildbarn's)
  uint64_t shm_size_bytes = uint64_t{64} << 20; // /dev/shm tmpfs cap
  std::string hostname = "motor-job";
  uid_t uid = 0;                      // the job account (motor-job); 0 is refused
  gid_t gid = 0;
  std::string user_name = "motor-job";
  std::string group_name = "motor-job";
  std::string init_path;              // host path of the motor-init executable
  // An outbound job (issue 9): its veth to the runner's egress namespace; /etc/resolv.conf then
  // names the gateway, the runner's filtering resolver. Absent: loopback only.
  std::optional<JobNetworkPlan> network;
  bool deny_sockets = false;          // seccomp also refuses socket/socketpair (file-only helpers)
};

struct SandboxPlan {
  NamespacePlan namespaces;
  MountPlan mounts;
  std::string hostname;
  CapabilityPlan capabilities;
  SeccompProgram seccomp;
  std::optional<JobNetworkPlan> network;
  std::shared_ptr<const UniqueFd> init_fd;  // motor-init, O_PATH, opened without following symlinks
};

Expected<SandboxPlan> plan_sandbox(const SandboxConfig& config);

// Hooks that build the plan in the child: before_credentials (as root) verifies the namespaces
// are new, builds the root and pivots, sets the hostname, brings lo up, locks securebits and
// empties the bounding set; after_credentials (as the job account) marks inherited fds
// close-on-exec, clears every capability set, sets no_new_privs and loads the seccomp filter.
ChildHooks make_child_hooks(const SandboxPlan& plan);

// {"motor-init", "--", command...}: the argv for spec.executable = kSandboxInitPath.
std::vector<std::string> init_argv(const std::vector<std::string>& command);

}  // namespace motor::sandbox
