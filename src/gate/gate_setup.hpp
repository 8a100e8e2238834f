// What `motor-runner gate` starts around its attacks (docs/server-gate.md, "What the gate does"):
// the gate runner's config, the runner itself, the host listener and marker process. gate_run.cpp
// keeps them and cleans them up.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "gate/gate_run.hpp"
#include "motor/expected.hpp"

namespace motor::gate {

// Where the gate runner keeps its config, state, socket and log.
struct RunnerPaths {
  std::string config, state_dir, socket, log;
};

// The operator's config text with what must differ for a gate run: its own cgroup parent (never
// the production runner's jobs), no metrics file, kill on SIGTERM, and `extra` (a transport's
// lines: they replace the operator's keys of those names).
Expected<std::string> derived_config(const GateOptions& options, const std::string& cgroup_parent,
                                     const std::string& extra = "");
// `exe serve` on the gate's config, state directory and socket (its pid in `runner` from the
// fork on, -1 once it exited); waits until the socket answers.
Status start_runner(const RunnerPaths& paths, const std::string& exe, pid_t& runner);
bool socket_answers(const std::string& path);
// A TCP listener on the host's 127.0.0.1, checked reachable from the host: its fd and port.
Expected<std::pair<int, int>> open_listener();
// A host process (sleep) with the marker in its command line; dies with the gate.
pid_t start_marker_process(const std::string& marker);
// Host pids whose command line contains `marker` (not the gate's own).
std::vector<pid_t> processes_with(const std::string& marker);
std::string self_exe();

}  // namespace motor::gate
