// What a Linux job sandbox is made of (DESIGN.md "A Linux job"): the parent's description that
// plan_sandbox (sandbox_plan.hpp) turns into a plan, and that the job starter carries to its
// helper in the wire form of sandbox_codec.hpp.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/idmap.hpp"
#include "sandbox/job_network.hpp"

namespace motor::sandbox {

struct ToolchainPath {
  std::string path;       // host path, bound read-only at the same path (a symlink is recreated)
  bool optional = false;  // skipped if absent on the host; a required path that is absent fails
  bool operator==(const ToolchainPath&) const = default;
};

// /usr and the merged-/usr links, the loader cache, alternatives, CA certificates, a few /etc
// files: enough for cc, make, cargo (from a configured toolchain path), python3 and git.
std::vector<ToolchainPath> default_toolchain_paths();

struct BindMount {
  BindMount() = default;
  BindMount(std::string source_path, std::string target_path, std::optional<IdMap> id_map = std::nullopt)
      : source(std::move(source_path)), target(std::move(target_path)), idmap(id_map) {}
  std::string source;  // absolute host path (no symlink in any component)
  std::string target;  // absolute path inside the sandbox; empty = same as source
  // Read-only binds only: the tree shown as owned by another account (sandbox/idmap.hpp).
  std::optional<IdMap> idmap;
  bool operator==(const BindMount&) const = default;
};

struct SandboxConfig {
  std::vector<ToolchainPath> toolchain = default_toolchain_paths();  // read-only, nosuid, nodev
  BindMount workspace;                // writable, nosuid, nodev; required; also the job's $HOME in passwd
  std::vector<BindMount> writable;    // more writable binds (the workspace's target dir)
  std::vector<BindMount> read_only;   // sibling workspaces: read-only, nosuid, nodev
  // Shared caches: each under a private writable layer (sandbox/overlay.hpp), nosuid, nodev; the
  // job's writes stay in it (capped at tmp_size_bytes each) and go with the job. `idmap` shows the
  // shared tree as owned by the job's account, so that writing there never fails for permissions.
  std::vector<BindMount> overlaid;
  uint64_t tmp_size_bytes = uint64_t{1} << 30;  // private /tmp tmpfs cap
  std::string tmp_source;             // a host directory bound writable at /tmp instead (Buildbarn's)
  uint64_t shm_size_bytes = uint64_t{64} << 20; // /dev/shm tmpfs cap
  std::string hostname = "motor-job";
  uid_t uid = 0;                      // the job account (motor-job); 0 is refused
  gid_t gid = 0;
  std::string user_name = "motor-job";
  std::string group_name = "motor-job";
  std::string init_path;              // host path of the motor-init executable
  // An outbound job (issue 9): its veth to the runner's egress namespace; /etc/resolv.conf then
  // names the gateway, the runner's filtering resolver. Absent: loopback only.
  std::optional<JobNetworkPlan> network;
  bool deny_sockets = false;          // seccomp also refuses socket/socketpair (file-only helpers)
  // Symlinks made in the sandbox's root: (path inside, link text). A disk tool's staged tree.
  std::vector<std::pair<std::string, std::string>> symlinks;
  // Before the command, as root in the sandbox's own mount namespace: every .gitignore,
  // .gitattributes, .gitmodules or .mailmap under the workspace that is a FIFO, socket or
  // device is covered with an empty read-only file (git opens those by name; a FIFO would block
  // it for good). For the workspace's git helpers, which run after the job's cgroup is empty.
  bool mask_special_git_files = false;
  // Built by the job account itself, holding no capabilities, in a user namespace of the job's
  // own (user_namespace.hpp): a systemd backend job's motor-unit-entry, in a unit with an empty
  // CapabilityBoundingSet (runner/job_systemd.cpp sets it).
  bool own_user_namespace = false;
  // The workspace is mounted in later (late_binds.hpp): the plan makes only its mount point,
  // `workspace.target` (a sandbox built ahead of its job; `workspace.source` is then empty).
  bool workspace_later = false;
  // Every field: a sandbox built ahead serves a job only if the two are equal but for the binds
  // late_binds.hpp puts in later (new fields take part without a change there).
  bool operator==(const SandboxConfig&) const = default;
};

// The first bind shown through an id mapping (a shared cache owned by another account), or null.
// Making one takes CAP_SYS_ADMIN over the source's filesystem: not for own_user_namespace.
const BindMount* first_idmapped_bind(const SandboxConfig& config);

}  // namespace motor::sandbox
