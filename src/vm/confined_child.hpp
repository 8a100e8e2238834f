// A command in the Linux job sandbox (src/sandbox), started on the loop in a cgroup of its own
// and watched by the reactor's ChildProcess: what the confined disk tools (disk_tool.hpp) and a
// VM job's dependency preparation (prep_step.hpp) share. stdout and stderr share one pipe.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/child_process.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/sandbox_plan.hpp"

namespace motor::vm {

struct ConfinedCommand {
  std::vector<std::string> command;  // run by motor-init, PID 1 of the sandbox
  std::vector<std::string> env;
  std::string cwd;
  sandbox::Account account;          // never root
  std::string cgroup_name;           // unique under the runner's cgroup parent
  sandbox::CgroupLimits limits;
  uint64_t timeout_ms = 0;           // 0: none (killing motor-init ends the whole sandbox)
  size_t max_output_bytes = 2048;
};

struct ConfinedChild {
  // Resetting it kills what is left of the command and removes the cgroup (on the runner's
  // CgroupReaper while it is busy: sandbox/cgroup_reaper.hpp).
  std::unique_ptr<sandbox::JobCgroup> cgroup;
  UniqueFd setup_status;  // the sandbox's setup-status pipe: its text explains a setup failure
  std::unique_ptr<reactor::ChildProcess> child;
};

// The sandbox every confined command starts from: runs as `account` (user and group of that name)
// under motor-init, with `hostname` and a private /tmp of `tmp_bytes`; callers add their mounts.
sandbox::SandboxConfig confined_box(const sandbox::Account& account, const std::string& hostname,
                                    const std::string& init_path, uint64_t tmp_bytes);

// Creates the cgroup, spawns the command in `plan`'s sandbox and adopts it; on error nothing is
// left (the cgroup is removed again).
Expected<ConfinedChild> spawn_confined(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, const sandbox::SandboxPlan& plan,
                                       const ConfinedCommand& cmd, reactor::ChildProcess::Done done);

// Reads what the setup-status pipe holds (a failed sandbox step, written before exec), without
// blocking, and closes it.
std::string read_setup_failure(UniqueFd& setup_status);

}  // namespace motor::vm
