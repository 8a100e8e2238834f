#include "sandbox/late_binds.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/mounts.hpp"
#include "sandbox/sandbox_plan.hpp"

namespace motor::sandbox {
namespace {

bool is_at_or_under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// Something the sandbox mounts or places at or below `dir`, which a bind over `dir` would hide.
bool holds_something_under(const SandboxConfig& box, const std::string& dir) {
  for (const auto* binds : {&box.writable, &box.read_only, &box.overlaid}) {
    for (const BindMount& b : *binds) {
      if (is_at_or_under(b.target.empty() ? b.source : b.target, dir)) return true;
    }
  }
  for (const auto& [path, text] : box.symlinks) {
    if (is_at_or_under(path, dir)) return true;
  }
  return false;
}

// The source as a detached copy of its mount tree, with the bind's attributes, private.
int capture(const LateBind& bind, UniqueFd& tree) {
  UniqueFd source(open_no_symlinks(AT_FDCWD, bind.source.c_str(), O_PATH | O_DIRECTORY, 0));
  if (!source) return errno;
  int copy = -1;
  const int err = detached_copy(source.get(), bind.attr_set, -1, copy);
  tree = UniqueFd(copy);
  return err;
}

// Inside the sandbox's namespace: the tree attached at `target`, found from the sandbox's root
// without following a symlink (the job never ran here, but the rule is the plan's).
int attach(const LateBind& bind, int tree) {
  UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return errno;
  UniqueFd target(open_no_symlinks(root.get(), bind.target.c_str() + 1, O_PATH | O_DIRECTORY, RESOLVE_BENEATH));
  if (!target) return errno;
  return move_mount(tree, "", target.get(), "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0 ? 0 : errno;
}

}  // namespace

Expected<std::vector<LateBind>> late_binds(const SandboxConfig& built, const SandboxConfig& job) {
  if (!built.workspace_later || built.network || built.own_user_namespace || built.mask_special_git_files ||
      !built.tmp_source.empty()) {
    return make_error("internal", "a sandbox built ahead has its workspace mounted later, a tmpfs /tmp, no network, no "
                                  "git masks and no user namespace of its own");
  }
  if (job.workspace_later) return make_error("internal", "the job's own workspace is not known");
  SandboxConfig as_built = job;
  as_built.workspace.source = built.workspace.source;
  as_built.workspace_later = true;
  as_built.tmp_source.clear();
  if (!(as_built == built)) return make_error("config", "the job's sandbox is not the one built ahead");
  std::vector<LateBind> binds;
  if (holds_something_under(built, built.workspace.target)) {
    return make_error("config", "the sandbox mounts something inside the workspace");
  }
  if (auto st = host_bind_directory(job.workspace.source, "workspace"); !st) return st.error();
  binds.push_back({job.workspace.source, built.workspace.target, workspace_bind_attrs()});
  if (!job.tmp_source.empty()) {
    if (holds_something_under(built, "/tmp")) return make_error("config", "the sandbox mounts something inside /tmp");
    if (auto st = host_bind_directory(job.tmp_source, "tmp source"); !st) return st.error();
    binds.push_back({job.tmp_source, "/tmp", host_tmp_bind_attrs()});
  }
  return binds;
}

int mount_late_binds(int mount_ns, const std::vector<LateBind>& binds, const char*& stage, bool& stranded) {
  stranded = false;
  stage = "late binds: open our own mount namespace";
  UniqueFd own(open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  if (!own) return errno;
  std::vector<UniqueFd> trees(binds.size());
  for (size_t i = 0; i < binds.size(); ++i) {
    stage = "late binds: capture a source (open_tree)";
    if (int err = capture(binds[i], trees[i]); err != 0) return err;
  }
  stage = "late binds: enter the sandbox's mount namespace";
  if (setns(mount_ns, CLONE_NEWNS) != 0) return errno;
  int err = 0;
  for (size_t i = 0; i < binds.size() && err == 0; ++i) {
    stage = "late binds: attach at the mount point (move_mount)";
    err = attach(binds[i], trees[i].get());
  }
  if (setns(own.get(), CLONE_NEWNS) != 0) {
    stranded = true;
    stage = "late binds: return to our own mount namespace";
    return errno;
  }
  return err;
}

}  // namespace motor::sandbox
