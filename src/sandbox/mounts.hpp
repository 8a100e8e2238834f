// The job's filesystem: an empty tmpfs root that only holds what the plan puts there, then
// pivot_root with the old root detached. The plan (paths, file contents, options) is built in the
// parent; the child walks it with the new mount API (open_tree, fsopen/fsmount, move_mount,
// mount_setattr) and never follows a symlink while doing so: a job that planted a symlink in its
// workspace cannot redirect a later job's mount.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::sandbox {

enum class MountOpKind {
  kBind,        // source (host path, captured before the root changes) -> target
  kFilesystem,  // a fresh filesystem of type `source` (tmpfs, proc, devpts) at target
  kFile,        // a regular file with `content` and `mode`
  kSymlink,     // a symlink with text `source`
  kDirectory,   // an empty directory with `mode` (a mount point for later: late_binds.hpp)
  kCharDevice,  // mknod S_IFCHR `device` with `mode`
  kMask,        // an existing file below another filesystem (procfs) covered by a read-only bind of
                // the empty file `source` (a path inside the sandbox, placed by an earlier op)
  kOverlay,     // a private writable layer over the host directory `source` (sandbox/overlay.hpp);
                // `content` holds the upper tmpfs's size
};

struct MountOp {
  MountOpKind kind = MountOpKind::kBind;
  std::string target;                // absolute path inside the sandbox
  std::vector<std::string> parents;  // target's components but the last
  std::string name;                  // target's last component
  std::string source;                // kBind: host path; kFilesystem: fs type; kSymlink: link text
  bool source_is_dir = true;         // kBind
  uint64_t attr_set = 0;             // MOUNT_ATTR_* (kBind: applied recursively; kFilesystem: fsmount)
  std::vector<std::pair<std::string, std::string>> fs_options;  // kFilesystem; empty value = flag
  bool read_only_after = false;      // kFilesystem: made read-only once everything under it exists
  std::string content;               // kFile
  mode_t mode = 0;                   // kFile, kCharDevice
  dev_t device = 0;                  // kCharDevice; kBind: the source must be this character device
  std::string stage;                 // names the step in a setup failure ("bind /usr")
  std::shared_ptr<const UniqueFd> idmap_userns;  // kBind: idmapped through this user namespace
};

struct MountPlan {
  std::vector<MountOp> ops;  // sorted by target: parents before children
  // Where the new root is attached before pivot_root (inside the job's private mount namespace;
  // every bind source is captured as a file descriptor before anything is mounted here).
  std::string staging = "/tmp";
  std::string root_size = "1m";
};

// Path checks used by every planner: absolute, no empty, "." or ".." component, no trailing '/'.
Status validate_absolute_path(const std::string& path, const std::string& what);
std::vector<std::string> path_components(const std::string& path);
// Refuses a host path with a symlink in any component but the last (lstat in the parent).
Status check_no_symlink_parents(const std::string& path, const std::string& what);
// A host path a bind takes: absolute, no symlink in any component, and a directory (true) or a
// regular file (false); anything else is a config error naming `what`.
Expected<bool> host_bind_source(const std::string& path, const std::string& what);
// The same, for a bind that must be a directory.
Status host_bind_directory(const std::string& path, const std::string& what);

MountOp bind_op(const std::string& source, const std::string& target, bool is_dir, uint64_t attr_set,
                const std::string& stage);
MountOp filesystem_op(const std::string& fstype, const std::string& target,
                      std::vector<std::pair<std::string, std::string>> options, uint64_t attr_set,
                      bool read_only_after);
MountOp file_op(const std::string& target, std::string content, mode_t mode);
MountOp symlink_op(const std::string& target, const std::string& text);
MountOp directory_op(const std::string& target, mode_t mode);
MountOp mask_op(const std::string& target, const std::string& empty_file);
MountOp char_device_op(const std::string& target, unsigned major, unsigned minor, mode_t mode);
// The host's character device at the same path, bound read-only (its mode and owner stay the
// host's), nosuid, noexec: for a sandbox that may not mknod (devices.hpp).
MountOp bind_device_op(const std::string& path, unsigned major, unsigned minor);

// Sorts the ops and refuses duplicate targets.
Status finish_mount_plan(MountPlan& plan);

// openat2 with O_CLOEXEC | O_NOFOLLOW added to `flags` and no symlink or magic link followed in
// any component (`resolve` may add RESOLVE_BENEATH). An fd, or -1 and errno.
int open_no_symlinks(int dirfd, const char* path, uint64_t flags, uint64_t resolve);
// The mount tree at `source_fd` as a detached, private copy with `attr_set` applied recursively
// (idmapped through `idmap_userns_fd` when >= 0): sets `tree` (the caller closes it, also on
// failure when >= 0). 0 or an errno. No allocation: the sandbox's child calls it.
int detached_copy(int source_fd, uint64_t attr_set, int idmap_userns_fd, int& tree);

// Child scratch, sized in the parent so the child does not allocate.
struct MountScratch {
  std::vector<int> fds;  // one per op
};
MountScratch make_mount_scratch(const MountPlan& plan);

// Child, as root, in the new mount namespace: MS_PRIVATE on everything, capture bind sources,
// build the root, pivot_root, detach the old root, make the root read-only.
int apply_mounts(const MountPlan& plan, MountScratch& scratch, const char*& stage);

}  // namespace motor::sandbox
