// A command in the Linux job sandbox (src/sandbox), in a cgroup of its own, as a SandboxedChild
// (sandbox/sandboxed_child.hpp: through the runner's job starter where it has one): what the
// confined disk tools (disk_tool.hpp) and a VM job's dependency preparation (prep_step.hpp)
// share. stdout and stderr share one pipe.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/sandboxed_child.hpp"
#include "sandbox/starter.hpp"

namespace motor::vm {

struct ConfinedCommand {
  std::vector<std::string> command;  // run by motor-init, PID 1 of the sandbox
  std::vector<std::string> env;
  std::string cwd;
  std::string cgroup_name;           // unique under the runner's cgroup parent
  sandbox::CgroupLimits limits;
  uint64_t timeout_ms = 0;           // 0: none (killing motor-init ends the whole sandbox)
  size_t max_output_bytes = 2048;
  std::function<void(std::string_view)> stream_output;  // set: the output goes here as it arrives
};

struct ConfinedChild {
  // Resetting it kills what is left of the command and removes the cgroup (on the runner's
  // CgroupReaper while it is busy: sandbox/cgroup_reaper.hpp).
  std::unique_ptr<sandbox::JobCgroup> cgroup;
  std::unique_ptr<sandbox::SandboxedChild> child;
};

// Error: it could not be started (after spawn_confined returned: the starter failed).
using ConfinedDone = std::function<void(Expected<sandbox::SandboxedExit>)>;

// The sandbox every confined command starts from: runs as `account` (user and group of that name)
// under motor-init, with `hostname` and a private /tmp of `tmp_bytes`; callers add their mounts.
sandbox::SandboxConfig confined_box(const sandbox::Account& account, const std::string& hostname,
                                    const std::string& init_path, uint64_t tmp_bytes);

// Creates the cgroup and starts the command in `box` (never as root); on error nothing is left
// (the cgroup is removed again). `done` runs once, unless the ConfinedChild is dropped first.
Expected<ConfinedChild> spawn_confined(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, sandbox::Starter& starter,
                                       const sandbox::SandboxConfig& box, ConfinedCommand cmd, ConfinedDone done);

// "exit status N" or "signal N", for messages.
std::string describe_exit(const sandbox::SandboxedExit& exit);

}  // namespace motor::vm
