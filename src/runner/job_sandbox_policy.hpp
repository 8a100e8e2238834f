// A Linux job's sandbox policy, decided from the runner's config and the job's request: the
// workspace at /workspace, the shared caches read-only, the caller's sibling workspaces read-only
// at /siblings/<key>, the job account, motor-init as PID 1. The job starter plans the mounts and
// namespaces from it just before its clone3 (job_starter.hpp); the child only makes the calls.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/messages.hpp"
#include "config/config.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/sandbox_plan.hpp"

namespace motor::runner {

// Where a job sees its workspace (its cwd is below it, its $HOME is it) and its siblings.
inline constexpr const char* kWorkspaceInJob = "/workspace";
inline constexpr const char* kSiblingsInJob = "/siblings";

struct JobIdentity {
  const sandbox::Account& account;  // the job account
  const std::string& group_name;    // its primary group's name
  const std::string& init_path;     // motor-init on the host
};

// Why a job is refused before it starts, and what to tell its client.
struct Refusal {
  protocol::RefusalReason reason;
  std::string detail;
};

// The policy without the network (the runner claims that, it is released with the job), into
// `box`; or why the job cannot have one.
std::optional<Refusal> job_sandbox_policy(const config::Config& config, const JobIdentity& who, const std::string& caller,
                                          const std::string& workspace_dir, const protocol::RunParams& params,
                                          sandbox::SandboxConfig& box);

// The command as a VM's guest runs it: through /bin/sh -c, or the argv as given.
std::vector<std::string> job_command(const protocol::RunParams& params);

// The argv of a Linux job's motor-init (its executable sandbox::kSandboxInitPath): a `command`
// through bash with the trap that reports its last pipeline (`pipestatus`, sandbox/pipestatus.hpp)
// when the job's root has bash (the toolchain binds the host's /usr), else through /bin/sh -c;
// an argv as given, with no report.
std::vector<std::string> linux_init_argv(const protocol::RunParams& params, const sandbox::SandboxConfig& box);

}  // namespace motor::runner
