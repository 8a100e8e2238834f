#include "sandbox/mounts.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "sandbox/overlay.hpp"

namespace motor::sandbox {

int open_no_symlinks(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
  open_how how{};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = resolve | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
}

int detached_copy(int source_fd, uint64_t attr_set, int idmap_userns_fd, int& tree) {
  tree = open_tree(source_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
  if (tree < 0) return errno;
  mount_attr attr{};
  attr.attr_set = attr_set;
  attr.propagation = MS_PRIVATE;
  if (idmap_userns_fd >= 0) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(idmap_userns_fd);
  }
  return mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) == 0 ? 0 : errno;
}
namespace {

int openat2_beneath(int dirfd, const char* name, uint64_t flags) {
  return open_no_symlinks(dirfd, name, flags, RESOLVE_BENEATH);
}

int openat2_host(const char* path) { return open_no_symlinks(AT_FDCWD, path, O_PATH, 0); }

void close_if(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Creates and enters each parent directory of `op.target` below `root`, never following a
// symlink. `out` is `root` itself or a new fd the caller closes.
int walk_parents(int root, const MountOp& op, int& out) {
  int cur = root;
  for (const std::string& comp : op.parents) {
    if (mkdirat(cur, comp.c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      if (cur != root) close(cur);
      return err;
    }
    const int next = openat2_beneath(cur, comp.c_str(), O_PATH | O_DIRECTORY);
    const int err = errno;
    if (cur != root) close(cur);
    if (next < 0) return err;
    cur = next;
  }
  out = cur;
  return 0;
}

int new_filesystem(const MountOp& op, int& mnt) {
  const int fs = fsopen(op.source.c_str(), FSOPEN_CLOEXEC);
  if (fs < 0) return errno;
  int err = 0;
  for (const auto& [key, value] : op.fs_options) {
    const int rc = value.empty() ? fsconfig(fs, FSCONFIG_SET_FLAG, key.c_str(), nullptr, 0)
                                 : fsconfig(fs, FSCONFIG_SET_STRING, key.c_str(), value.c_str(), 0);
    if (rc != 0) {
      err = errno;
      break;
    }
  }
  if (err == 0 && fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) err = errno;
  if (err == 0) {
    mnt = fsmount(fs, FSMOUNT_CLOEXEC, static_cast<unsigned>(op.attr_set));
    if (mnt < 0) err = errno;
  }
  close(fs);
  return err;
}

int set_read_only(int mnt) {
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  return mount_setattr(mnt, "", AT_EMPTY_PATH, &attr, sizeof(attr)) == 0 ? 0 : errno;
}

// Places one op below `dir` (the target's parent).
int place(const MountOp& op, int dir, int& fd) {
  const char* name = op.name.c_str();
  switch (op.kind) {
    case MountOpKind::kBind:
    case MountOpKind::kOverlay:
    case MountOpKind::kMask:
    case MountOpKind::kFilesystem: {
      const bool dir_target = op.kind == MountOpKind::kFilesystem || op.kind == MountOpKind::kOverlay ||
                              (op.kind == MountOpKind::kBind && op.source_is_dir);
      if (dir_target) {
        if (mkdirat(dir, name, 0755) != 0 && errno != EEXIST) return errno;
      } else {
        if (mknodat(dir, name, S_IFREG | 0444, 0) != 0 && errno != EEXIST) return errno;
      }
      if (op.kind == MountOpKind::kFilesystem) {
        if (int err = new_filesystem(op, fd); err != 0) return err;
      }
      const int target = openat2_beneath(dir, name, O_PATH | (dir_target ? O_DIRECTORY : 0));
      if (target < 0) return errno;
      const int rc = move_mount(fd, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
      const int err = errno;
      close(target);
      if (rc != 0) return err;
      if (op.kind != MountOpKind::kFilesystem) close_if(fd);  // kFilesystem keeps it for read_only_after
      return 0;
    }
    case MountOpKind::kFile: {
      const int f = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, op.mode);
      if (f < 0) return errno;
      size_t done = 0;
      while (done < op.content.size()) {
        const ssize_t n = write(f, op.content.data() + done, op.content.size() - done);
        if (n <= 0) {
          const int err = n < 0 ? errno : EIO;
          close(f);
          return err;
        }
        done += static_cast<size_t>(n);
      }
      close(f);
      return 0;
    }
    case MountOpKind::kSymlink:
      return symlinkat(op.source.c_str(), dir, name) == 0 ? 0 : errno;
    case MountOpKind::kDirectory:
      return mkdirat(dir, name, op.mode) == 0 ? 0 : errno;
    case MountOpKind::kCharDevice:
      if (mknodat(dir, name, S_IFCHR | op.mode, op.device) != 0) return errno;
      return fchmodat(dir, name, op.mode, 0) == 0 ? 0 : errno;
  }
  return EINVAL;
}

}  // namespace

Status validate_absolute_path(const std::string& path, const std::string& what) {
  if (path.empty() || path[0] != '/') return make_error("config", what + " must be an absolute path: '" + path + "'");
  if (path == "/") return {};
  if (path.back() == '/') return make_error("config", what + " must not end in '/': '" + path + "'");
  if (path.find('\0') != std::string::npos) return make_error("config", what + " holds a NUL byte");
  for (const std::string& comp : path_components(path)) {
    if (comp.empty() || comp == "." || comp == "..")
      return make_error("config", what + " must be normalized (no '//', '.' or '..'): '" + path + "'");
  }
  return {};
}

std::vector<std::string> path_components(const std::string& path) {
  std::vector<std::string> out;
  size_t pos = 1;
  while (pos <= path.size()) {
    const size_t next = path.find('/', pos);
    const size_t end = next == std::string::npos ? path.size() : next;
    out.push_back(path.substr(pos, end - pos));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

Status check_no_symlink_parents(const std::string& path, const std::string& what) {
  size_t pos = 0;
  while ((pos = path.find('/', pos + 1)) != std::string::npos) {
    const std::string prefix = path.substr(0, pos);
    struct stat st {};
    if (lstat(prefix.c_str(), &st) != 0) return sys_error(what + ": " + prefix);
    if (S_ISLNK(st.st_mode))
      return make_error("config", what + " '" + path + "' goes through the symlink '" + prefix +
                                      "'; configure the resolved path");
  }
  return {};
}

Expected<bool> host_bind_source(const std::string& path, const std::string& what) {
  if (auto st = validate_absolute_path(path, what); !st) return st.error();
  if (auto st = check_no_symlink_parents(path, what); !st) return st.error();
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return sys_error(what + " " + path);
  if (S_ISDIR(st.st_mode)) return true;
  if (S_ISREG(st.st_mode)) return false;
  return make_error("config", what + " " + path + " is neither a directory nor a regular file");
}

Status host_bind_directory(const std::string& path, const std::string& what) {
  auto is_dir = host_bind_source(path, what);
  if (!is_dir) return is_dir.error();
  if (!*is_dir) return make_error("config", what + " " + path + " is not a directory");
  return {};
}

// An op of `kind` at `target` (its parents and last component split out), named `stage`.
static MountOp op_at(MountOpKind kind, const std::string& target, std::string stage) {
  MountOp op;
  op.kind = kind;
  op.target = target;
  op.parents = path_components(target);
  op.name = op.parents.back();
  op.parents.pop_back();
  op.stage = std::move(stage);
  return op;
}

MountOp bind_op(const std::string& source, const std::string& target, bool is_dir, uint64_t attr_set,
                const std::string& stage) {
  MountOp op = op_at(MountOpKind::kBind, target, stage);
  op.source = source;
  op.source_is_dir = is_dir;
  op.attr_set = attr_set;
  return op;
}

MountOp filesystem_op(const std::string& fstype, const std::string& target,
                      std::vector<std::pair<std::string, std::string>> options, uint64_t attr_set,
                      bool read_only_after) {
  MountOp op = op_at(MountOpKind::kFilesystem, target, "mount " + fstype + " at " + target);
  op.source = fstype;
  op.fs_options = std::move(options);
  op.attr_set = attr_set;
  op.read_only_after = read_only_after;
  return op;
}

MountOp file_op(const std::string& target, std::string content, mode_t mode) {
  MountOp op = op_at(MountOpKind::kFile, target, "write " + target);
  op.content = std::move(content);
  op.mode = mode;
  return op;
}

MountOp symlink_op(const std::string& target, const std::string& text) {
  MountOp op = op_at(MountOpKind::kSymlink, target, "symlink " + target + " -> " + text);
  op.source = text;
  return op;
}

MountOp directory_op(const std::string& target, mode_t mode) {
  MountOp op = op_at(MountOpKind::kDirectory, target, "mkdir " + target);
  op.mode = mode;
  return op;
}

MountOp mask_op(const std::string& target, const std::string& empty_file) {
  MountOp op = op_at(MountOpKind::kMask, target, "mask " + target);
  op.source = empty_file;
  return op;
}

MountOp char_device_op(const std::string& target, unsigned major, unsigned minor, mode_t mode) {
  MountOp op = op_at(MountOpKind::kCharDevice, target, "mknod " + target);
  op.device = makedev(major, minor);
  op.mode = mode;
  return op;
}

MountOp bind_device_op(const std::string& path, unsigned major, unsigned minor) {
  MountOp op = bind_op(path, path, false, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "bind host device " + path);
  op.device = makedev(major, minor);
  return op;
}

Status finish_mount_plan(MountPlan& plan) {
  std::stable_sort(plan.ops.begin(), plan.ops.end(),
                   [](const MountOp& a, const MountOp& b) { return a.target < b.target; });
  for (size_t i = 1; i < plan.ops.size(); ++i) {
    if (plan.ops[i].target == plan.ops[i - 1].target)
      return make_error("config", "two sandbox mounts share the target " + plan.ops[i].target);
  }
  return {};
}

MountScratch make_mount_scratch(const MountPlan& plan) {
  MountScratch scratch;
  scratch.fds.assign(plan.ops.size(), -1);
  return scratch;
}

namespace {

// Step 2: every bind source captured now, as a detached copy of its mount tree with the final
// flags, before anything is mounted over the host's paths. An overlay's lower is captured the
// same way, then the overlay is made over it.
int capture_bind_sources(const MountPlan& plan, MountScratch& scratch, const char*& stage) {
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const MountOp& op = plan.ops[i];
    if (op.kind != MountOpKind::kBind && op.kind != MountOpKind::kOverlay) continue;
    stage = op.stage.c_str();
    const int src = openat2_host(op.source.c_str());
    if (src < 0) return errno;
    struct stat st {};
    const bool stated = fstat(src, &st) == 0;
    const bool kind_as_planned = op.device != 0 ? S_ISCHR(st.st_mode) && st.st_rdev == op.device
                                                : S_ISDIR(st.st_mode) == op.source_is_dir &&
                                                      (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode));
    if (!stated || !kind_as_planned) {
      close(src);
      return ENOTDIR;  // the source changed kind since the plan was made (or is not the device named)
    }
    const int err = detached_copy(src, op.attr_set, op.idmap_userns ? op.idmap_userns->get() : -1, scratch.fds[i]);
    close(src);
    if (err != 0) return err;
    if (op.kind == MountOpKind::kOverlay) {
      const int lower = scratch.fds[i];
      scratch.fds[i] = -1;
      if (int e = make_overlay(op, lower, scratch.fds[i]); e != 0) return e;
    }
  }
  return 0;
}

// Step 3: the new root, an empty tmpfs attached at the staging directory. Sets `root` (the
// caller closes it) or returns an errno.
int attach_new_root(const MountPlan& plan, int& root, const char*& stage) {
  stage = "mounts: new root tmpfs";
  const int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0) return errno;
  int err = 0;
  if (fsconfig(fs, FSCONFIG_SET_STRING, "size", plan.root_size.c_str(), 0) != 0 ||
      fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0) != 0 ||
      fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    err = errno;
  } else {
    root = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (root < 0) err = errno;
  }
  close(fs);
  if (err != 0) return err;
  stage = "mounts: attach the new root at the staging directory";
  if (move_mount(root, "", AT_FDCWD, plan.staging.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) return errno;
  return 0;
}

// Step 4: every op below `root`, parents first, then the binds that turn read-only.
int place_all(const MountPlan& plan, MountScratch& scratch, int root, const char*& stage) {
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const MountOp& op = plan.ops[i];
    stage = op.stage.c_str();
    if (op.kind == MountOpKind::kMask) {
      // The empty file was placed by an earlier op (its target sorts first); clone it read-only.
      scratch.fds[i] = open_tree(root, op.source.c_str() + 1, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
      mount_attr attr{};
      attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
      attr.propagation = MS_PRIVATE;
      if (scratch.fds[i] < 0 || mount_setattr(scratch.fds[i], "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) return errno;
    }
    int dir = -1;
    int err = walk_parents(root, op, dir);
    if (err == 0) {
      err = place(op, dir, scratch.fds[i]);
      if (dir != root) close(dir);
    }
    if (err != 0) return err;
  }
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    if (!plan.ops[i].read_only_after) continue;
    stage = plan.ops[i].stage.c_str();
    if (int err = set_read_only(scratch.fds[i]); err != 0) return err;
  }
  return 0;
}

// Step 5: pivot_root into the new root and detach the old one: nothing of the host stays
// reachable. Step 6: the root itself (and so /etc and every mount point) is read-only (unless a
// test build weakened exactly that).
int pivot_into(int root, const char*& stage) {
  stage = "mounts: pivot_root";
  if (fchdir(root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0) return errno;
  stage = "mounts: detach the old root";
  if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) return errno;
  stage = "mounts: make / read-only";
  return control_weakened("readonly-root") ? 0 : set_read_only(root);
}

}  // namespace

int apply_mounts(const MountPlan& plan, MountScratch& scratch, const char*& stage) {
  // 1. Nothing we do may propagate back to the host.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    stage = "mounts: make / recursively private";
    return errno;
  }
  if (int err = capture_bind_sources(plan, scratch, stage); err != 0) return err;
  int root = -1;
  int err = attach_new_root(plan, root, stage);
  if (err == 0) err = place_all(plan, scratch, root, stage);
  for (int& fd : scratch.fds) close_if(fd);
  if (err == 0) err = pivot_into(root, stage);
  if (root >= 0) close(root);
  return err;
}

}  // namespace motor::sandbox
