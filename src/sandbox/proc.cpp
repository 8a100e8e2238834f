#include "sandbox/proc.hpp"

#include <sys/mount.h>
#include <sys/stat.h>

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
  // Host facts procfs shows in every namespace, covered with an empty read-only file (as
  // bubblewrap and podman mask paths): the host's boot command line (here the host agent's vsock
  // ports), its kernel config, its boot id (one value identifying the host across jobs and
  // callers) and every uid's key quota use. Only files this kernel has (the child cannot create
  // one in procfs).
  if (control_weakened("proc-masks")) return;  // test build only
  ops.push_back(file_op(kMaskedEmptyFile, "", 0444));
  for (const char* path : kMaskedProcFiles) {
    struct stat st {};
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) ops.push_back(mask_op(path, kMaskedEmptyFile));
  }
}

}  // namespace motor::sandbox
