#include "sandbox/overlay.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace motor::sandbox {
namespace {

// The upper's tmpfs, detached, with "upper" shown as the lower's root is (owner and mode through
// the lower's idmap) and "work" beside it. Sets `upper` and `work` (O_PATH dirs) or an errno.
int make_upper(const MountOp& op, int lower, int& tmpfs, int& upper, int& work) {
  struct stat st {};
  if (fstat(lower, &st) != 0) return errno;
  const int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0) return errno;
  int err = 0;
  if (fsconfig(fs, FSCONFIG_SET_STRING, "size", op.content.c_str(), 0) != 0 ||
      fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) != 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    err = errno;
  } else if ((tmpfs = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0) {
    err = errno;
  }
  close(fs);
  if (err != 0) return err;
  if (mkdirat(tmpfs, "upper", 0700) != 0 || mkdirat(tmpfs, "work", 0700) != 0) return errno;
  // The merged root takes the upper's owner and mode: the lower's, so the view is the lower's.
  if (fchownat(tmpfs, "upper", st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0 ||
      fchmodat(tmpfs, "upper", st.st_mode & 07777, 0) != 0) {
    return errno;
  }
  upper = openat(tmpfs, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (upper < 0) return errno;
  work = openat(tmpfs, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  return work < 0 ? errno : 0;
}

int mount_overlay(int lower, int upper, int work, int& mnt) {
  const int fs = fsopen("overlay", FSOPEN_CLOEXEC);
  if (fs < 0) return errno;
  int err = 0;
  // Layers by file descriptor (Linux 6.13+): the lower is a detached clone no path names.
  if (fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", nullptr, lower) != 0 ||
      fsconfig(fs, FSCONFIG_SET_FD, "upperdir", nullptr, upper) != 0 ||
      fsconfig(fs, FSCONFIG_SET_FD, "workdir", nullptr, work) != 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    err = errno;
  } else if ((mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0) {
    err = errno;
  }
  close(fs);
  return err;
}

}  // namespace

MountOp overlay_op(const std::string& lower, const std::string& target, uint64_t upper_bytes) {
  MountOp op = bind_op(lower, target, true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                       "overlay a private layer over " + lower + " at " + target);
  op.kind = MountOpKind::kOverlay;
  op.content = std::to_string(upper_bytes);  // the upper tmpfs's size option
  return op;
}

int make_overlay(const MountOp& op, int lower, int& mnt) {
  int tmpfs = -1, upper = -1, work = -1;
  int err = make_upper(op, lower, tmpfs, upper, work);
  if (err == 0) err = mount_overlay(lower, upper, work, mnt);
  for (int fd : {lower, tmpfs, upper, work}) {
    if (fd >= 0) close(fd);
  }
  return err;
}

}  // namespace motor::sandbox
