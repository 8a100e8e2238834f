// Checks and completes QEMU's confinement while its domain is still paused (issue 8): libvirt
// started it; before the guest runs an instruction the runner verifies, from /proc and the
// cgroup files, that it
//  - runs as the QEMU account (every uid and gid),
//  - sees a network namespace holding nothing but lo (/proc/PID/net/dev),
//  - has nothing of the runner's environment (only the variables libvirt itself sets),
//  - is in a memory cgroup whose limit is the domain's hard limit,
// and then puts it into a pids cgroup of the runner's own with pids.max set (or, where QEMU runs
// as a systemd unit with TasksMax, checks that its pids cgroup has that limit), and gives it a
// core-scheduling cookie of its own where the kernel has PR_SCHED_CORE. Any failure refuses the
// job: the caller destroys the domain (or stops the unit).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "motor/expected.hpp"

namespace motor::vm {

struct QemuConfinementSpec {
  pid_t pid = -1;
  uid_t uid = 0;
  gid_t gid = 0;
  int64_t hard_limit_bytes = 0;
  int64_t pids_max = 0;
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string pids_cgroup;  // relative to the pids hierarchy: "<runner parent>-vm/<job>" (parent made if missing)
  // The environment variables its launcher sets (qemu_launcher.hpp); anything else is refused.
  std::vector<std::string> environment_names;
  // QEMU's launcher limits its pids (a unit's TasksMax): checked, no cgroup of the runner's made.
  bool pids_limited_by_launcher = false;
};

struct QemuConfinement {
  std::string pids_cgroup_dir;  // created here; the VM job reaps it (sandbox/cgroup_reaper.hpp) once QEMU is gone
  std::string memory_cgroup_dir;
  std::string pids_limit_file;  // where the pids limit was set or found
  bool core_scheduling = false;  // false: the kernel has no PR_SCHED_CORE (the gate reports it)
  std::vector<std::string> interfaces;
};

// The environment variables libvirt sets for QEMU; anything else came from somewhere else.
const std::vector<std::string>& libvirt_qemu_environment_names();

// Pure parsers, unit-tested.
std::vector<std::string> parse_net_dev_interfaces(const std::string& net_dev);
// The cgroup path of `controller` in /proc/PID/cgroup text (v1 "N:ctrl,...:/path"), or the
// unified path ("0::/path") when controller is empty.
std::string cgroup_path_of(const std::string& proc_cgroup, const std::string& controller);

Expected<QemuConfinement> confine_qemu(const QemuConfinementSpec& spec);

// Whether this kernel offers core scheduling (PR_SCHED_CORE), for the gate.
bool core_scheduling_available();

}  // namespace motor::vm
