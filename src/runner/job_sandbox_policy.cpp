#include "runner/job_sandbox_policy.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "motor/test_switches.hpp"
#include "sandbox/pipestatus.hpp"
#include "workspace/workspace_dir.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::runner {

std::vector<std::string> job_command(const protocol::RunParams& p) {
  return p.command ? std::vector<std::string>{"/bin/sh", "-c", *p.command} : p.argv;
}

namespace {

constexpr const char* kBash = "/usr/bin/bash";  // /bin/bash in the job's merged-/usr root

// The job's root has bash: the host's, under a toolchain bind of /usr.
bool job_root_has_bash(const sandbox::SandboxConfig& box) {
  const bool usr_bound = std::any_of(box.toolchain.begin(), box.toolchain.end(),
                                     [](const sandbox::ToolchainPath& t) { return t.path == "/usr"; });
  return usr_bound && ::access(kBash, X_OK) == 0;
}

}  // namespace

std::vector<std::string> linux_init_argv(const protocol::RunParams& p, const sandbox::SandboxConfig& box) {
  if (!p.command || !job_root_has_bash(box)) return sandbox::init_argv(job_command(p));
  auto argv = sandbox::init_argv({"/bin/bash", "-c", sandbox::command_reporting_pipestatus(*p.command)});
  argv.insert(argv.begin() + 1, "--pipestatus");
  return argv;
}

std::optional<Refusal> job_sandbox_policy(const config::Config& config, const JobIdentity& who, const std::string& caller,
                                          const std::string& workspace_dir, const protocol::RunParams& p,
                                          sandbox::SandboxConfig& box) {
  box.workspace = {workspace_dir, kWorkspaceInJob};
  box.tmp_size_bytes = static_cast<uint64_t>(config.job_tmp_bytes);
  box.uid = who.account.uid;
  box.gid = who.account.gid;
  box.user_name = who.account.name;
  box.group_name = who.group_name;
  box.init_path = who.init_path;
  // Shared caches: at their own paths under a private writable layer, shown as the job's own
  // (their owner, motor-cache, idmapped to the job's account): nothing written reaches them, and a
  // build writing there does not fail. Test build only: "readonly-caches" binds them writable.
  for (const auto& cache : config.cache_paths) {
    if (motor::control_weakened("readonly-caches")) {
      box.writable.push_back({cache, cache});
      continue;
    }
    sandbox::BindMount layer{cache, cache};
    struct stat cst {};
    if (lstat(cache.c_str(), &cst) == 0 && cst.st_uid != 0 && cst.st_uid != box.uid && cst.st_gid != 0) {
      layer.idmap = sandbox::IdMap{cst.st_uid, box.uid, cst.st_gid, box.gid};
    }
    box.overlaid.push_back(std::move(layer));
  }
  if (motor::control_weakened("empty-root")) {
    // Test build only: host paths the empty root keeps out, bound read-only as a leaky bind list would.
    for (const std::string path : {"/root", "/etc/shadow", config.state_dir.c_str()}) box.read_only.push_back({path, path});
  }
  // Sibling workspaces of the same caller: read-only at /siblings/<name>, the key's on-disk name
  // (a short key itself; a caller's path key is never a path here: workspace_dir.hpp).
  for (const auto& sibling : p.siblings) {
    if (auto s = workspace::validate_workspace_key(sibling); !s) {
      return Refusal{protocol::RefusalReason::kWorkspaceKeyRejected, s.error().message};
    }
    const auto dir = workspace::workspace_dir_path(config.effective_workspace_root(), caller, sibling);
    struct stat sst {};
    if (sibling == p.workspace_key || !dir || lstat(dir->c_str(), &sst) != 0 || !S_ISDIR(sst.st_mode)) {
      return Refusal{protocol::RefusalReason::kWorkspaceSetupFailed,
                     "sibling workspace \"" + sibling + "\" does not exist (or is this job's own)"};
    }
    box.read_only.push_back({*dir, std::string(kSiblingsInJob) + "/" + workspace::workspace_key_file_name(sibling)});
  }
  return std::nullopt;
}

}  // namespace motor::runner
