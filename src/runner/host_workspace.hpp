// exec.run's "host_workspace" (ext, issue 23): a trusted caller (motor-bb-runner) names a
// directory of the host's Buildbarn build directory as the job's workspace and another as its
// /tmp, instead of a workspace the runner keeps. Only root and the runner's own account may, and
// only on a runner with bb_build_directory set; both paths are resolved beneath that directory
// with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), so a symlink an action planted is never
// followed. Such a job's environment is passed as given (hermetic_env): docs/buildbarn.md.
#pragma once

#include "motor/simdjson_fwd.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "motor/expected.hpp"
#include "sandbox/sandbox_plan.hpp"

namespace motor::runner {

struct HostWorkspaceRequest {
  std::string input_root;  // relative to bb_build_directory: the job's /workspace, read-write
  std::string tmp;         // relative to bb_build_directory: the job's /tmp; "" = a private tmpfs
};

// Absent: nullopt. Present from a session that may not use it: `unauthorized`; malformed, or
// on a runner without bb_build_directory: `bad_request`.
Expected<std::optional<HostWorkspaceRequest>> parse_host_workspace(simdjson::dom::parser& parser,
                                                                    std::string_view params_json, bool privileged,
                                                                    const std::string& build_directory);

// The absolute host path of `relative` beneath `build_directory`: a directory reached without
// any symlink and without leaving the tree (`workspace_setup_failed` otherwise).
Expected<std::string> resolve_host_dir(const std::string& build_directory, const std::string& relative);

// Binds the request's tmp directory at the job's /tmp (nothing when it names none).
Status use_host_tmp(sandbox::SandboxConfig& box, const std::string& build_directory, const HostWorkspaceRequest& request);

// The action's environment as given, as NAME=VALUE: an action is hermetic, its variables are
// part of its digest. Only what execve cannot carry (a name that is empty or holds '=', a NUL)
// is left out.
std::vector<std::string> hermetic_env(const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace motor::runner
