// qemu-img and mke2fs for VM disks, run confined (issue 8): the Linux job sandbox of
// src/sandbox (own mount/PID/net/IPC/UTS/cgroup namespaces, a tmpfs root with /usr read-only,
// every capability dropped, no_new_privs) plus a seccomp filter that refuses socket(2) and
// socketpair(2), as an unprivileged account, in a cgroup of its own with memory and pids limits.
// Only `writable_dir` is writable; the sealed image (or a workspace tree) is bound read-only.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "vm/confined_child.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/sandbox_plan.hpp"

namespace motor::vm {

struct DiskToolSpec {
  std::vector<std::string> command;          // absolute program path first
  std::string writable_dir;                  // bound read-write at the same path; the cwd
  std::vector<sandbox::BindMount> read_only; // at their targets (same path when empty)
  std::vector<std::pair<std::string, std::string>> symlinks;  // (target, link text) in the sandbox
  sandbox::Account account;                  // never root
  std::string init_path;                     // motor-init
  std::string cgroup_name;                   // unique under the runner's cgroup parent
};

// The argv for `qemu-img create -f qcow2 -b SEALED -F qcow2 OVERLAY`.
std::vector<std::string> qemu_img_overlay_command(const std::string& sealed, const std::string& overlay);
// The argv for an ext4 image of `source_dir` (mke2fs -d; nothing is mounted), `size_bytes` sparse.
std::vector<std::string> mke2fs_from_dir_command(const std::string& source_dir, const std::string& image, int64_t size_bytes);

class DiskTool {
 public:
  using Done = std::function<void(Status)>;
  static Expected<std::unique_ptr<DiskTool>> start(uv_loop_t* loop, sandbox::CgroupDriver& cgroups,
                                                   sandbox::Starter& starter, const DiskToolSpec& spec, Done done);
  ~DiskTool();
  DiskTool(const DiskTool&) = delete;
  DiskTool& operator=(const DiskTool&) = delete;

 private:
  DiskTool() = default;
  void exited(Expected<sandbox::SandboxedExit> exit);

  std::string what_;
  ConfinedChild confined_;
  Done done_;
};

}  // namespace motor::vm
