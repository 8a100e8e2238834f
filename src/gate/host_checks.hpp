// Host checks of `motor-runner gate`: what the host and the config must provide before any job
// is trusted to it. Each failed check names its fix. A "note" is a host-level fact the gate
// reports without failing (a feature this kernel lacks that Motor does not rely on).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "config/config.hpp"

namespace motor::gate {

enum class CheckStatus { kOk, kFail, kNote };
const char* check_status_name(CheckStatus s);

struct HostCheck {
  std::string name;
  CheckStatus status = CheckStatus::kOk;
  std::string detail;  // what was seen
  std::string fix;     // what to do, when it failed
};

// What the attacks need to know about the host (from the checks).
struct HostFacts {
  bool memory_controller = false, pids_controller = false, cpuset_controller = false;
  std::string cgroup_layout;                // "v1", "v2", "hybrid" or ""
  std::vector<std::string> cgroup_mounts;   // mount points of the hierarchies in use (v1 controllers, cgroup2)
  bool seccomp = false;
  bool namespaces = false;
  bool core_scheduling = false;
  std::string machine;                      // uname -m
};

// The service accounts every Motor host has (DESIGN.md "The parts").
std::vector<std::string> service_accounts(const config::Config& config);

// Every check that needs no running runner. `paths_to_scan` bounds the ownership scan.
std::vector<HostCheck> run_host_checks(const config::Config& config, HostFacts& facts);

// The state directory and socket a runner made from this config (the gate's own runner, and the
// configured ones where they exist).
HostCheck check_state_dir(const std::string& label, const std::string& path);
HostCheck check_socket(const std::string& label, const std::string& path, const std::string& group);

}  // namespace motor::gate
