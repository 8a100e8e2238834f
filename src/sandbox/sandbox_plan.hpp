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
#include "sandbox/sandbox_config.hpp"
#include "sandbox/seccomp_policy.hpp"
#include "sandbox/spawn.hpp"
#include "sandbox/user_namespace.hpp"

namespace motor::sandbox {

// The executable the spawn names for motor-init. It is not in the job's root: the child execs
// SandboxPlan::init_fd (ChildHooks::exec_fd), a host file a bind would show by its host path in
// the job's mountinfo. Test build only ("workspace-names"): bound read-only here and exec'd by path.
inline constexpr const char* kSandboxInitPath = "/.motor/motor-init";

struct SandboxPlan {
  NamespacePlan namespaces;
  MountPlan mounts;
  std::string hostname;
  CapabilityPlan capabilities;
  SeccompProgram seccomp;
  std::optional<JobNetworkPlan> network;
  std::shared_ptr<const UniqueFd> init_fd;  // motor-init, O_PATH, opened without following symlinks
  std::string git_masks_root;  // SandboxConfig::mask_special_git_files: the workspace inside; empty: none
  std::optional<UserNamespacePlan> user_namespace;  // SandboxConfig::own_user_namespace
};

Expected<SandboxPlan> plan_sandbox(const SandboxConfig& config);

// MOUNT_ATTR_* of the workspace's bind and of a host /tmp's (late_binds.hpp binds them alike).
uint64_t workspace_bind_attrs();
uint64_t host_tmp_bind_attrs();

// Hooks that build the plan in the child: before_credentials (as root) verifies the namespaces
// are new, builds the root and pivots, sets the hostname, brings lo up, locks securebits and
// empties the bounding set; after_credentials (as the job account) marks inherited fds
// close-on-exec, clears every capability set, sets no_new_privs and loads the seccomp filter.
ChildHooks make_child_hooks(const SandboxPlan& plan);

// {"motor-init", "--", command...}: the argv for spec.executable = kSandboxInitPath.
std::vector<std::string> init_argv(const std::vector<std::string>& command);

// motor-init waiting for its command (--await-command): a sandbox built ahead of its job.
std::vector<std::string> awaiting_init_argv();
// What such a motor-init reads on its fd 0 (the format: src/sandbox/init/motor_init.cpp): the
// arguments it would have been started with (`init_argv`, argv[0] included, which is not sent),
// the command's environment and working directory. A string may hold no NUL (an env or argv
// string cannot).
std::string init_command_message(const std::vector<std::string>& init_argv, const std::vector<std::string>& env,
                                 const std::string& cwd);

}  // namespace motor::sandbox
