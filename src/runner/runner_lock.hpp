// One runner per state directory and per cgroup parent: an exclusive flock(2), taken at start
// before recovery (which kills what it finds) and held until the process ends. A second runner
// fails to start with a clear error instead of killing the first one's jobs.
#pragma once

#include <string>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::runner {

// Locks `<state_dir>/runner.lock` (created 0600) and writes this process's pid into it.
Expected<UniqueFd> lock_state_dir(const std::string& state_dir);

// Locks the runner's cgroup parent directory itself (flock works on cgroupfs directories, so
// nothing is created for it): the first of <root>/{unified,pids,memory,cpuset,freezer,cpu,.}/
// <parent> that exists, which is the same one for every runner of this host and parent.
Expected<UniqueFd> lock_cgroup_parent(const std::string& cgroup_root, const std::string& parent);

}  // namespace motor::runner
