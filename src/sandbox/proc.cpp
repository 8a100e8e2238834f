#include "sandbox/proc.hpp"

#include <sys/mount.h>

#include "motor/test_switches.hpp"

namespace motor::sandbox {

void plan_proc(std::vector<MountOp>& ops) {
  constexpr uint64_t kAttrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  // Test build only: the runner's own /proc (the host's processes) instead of a fresh one.
  if (control_weakened("fresh-proc")) {
    ops.push_back(bind_op("/proc", "/proc", true, kAttrs, "bind host /proc (test build)"));
    return;
  }
  // fsopen("proc") in the child takes the child's active PID namespace: the job's.
  ops.push_back(filesystem_op("proc", "/proc", {}, kAttrs, false));
}

}  // namespace motor::sandbox
