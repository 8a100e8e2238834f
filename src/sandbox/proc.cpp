#include "sandbox/proc.hpp"

#include <sys/mount.h>

namespace motor::sandbox {

void plan_proc(std::vector<MountOp>& ops) {
  // fsopen("proc") in the child takes the child's active PID namespace: the job's.
  ops.push_back(filesystem_op("proc", "/proc", {}, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false));
}

}  // namespace motor::sandbox
