// The runner's own timestamps of each job's start (src/runner/start_steps.hpp: a debug-level
// `start steps (us): recorded N admitted N ...` line per finished job), as medians per step.
// Start the runner with `log_level = debug` to get them.
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "stats.hpp"

namespace motor::bench {

// Step name -> microseconds since the runner took the exec.run, one entry per job that reached it.
inline std::map<std::string, std::vector<double>> start_steps_from_log(const std::string& log) {
  std::map<std::string, std::vector<double>> steps;
  const std::string marker = "start steps (us): ";
  for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    const size_t end = log.find('\n', at);
    std::istringstream in(log.substr(at + marker.size(), end == std::string::npos ? std::string::npos : end - at - marker.size()));
    std::string name;
    double us = 0;
    while (in >> name >> us) {
      if (us >= 0) steps[name].push_back(us);
    }
  }
  return steps;
}

// One line per step, in the order a start goes through them, with the median gap to the step before.
inline void print_start_steps(const std::string& log, const std::string& of = "") {
  const auto steps = start_steps_from_log(log);
  double before = 0;
  fmt::print("  runner's steps{} (median us since exec.run was taken; + median gap):\n", of.empty() ? "" : " of " + of);
  for (const char* name : {"recorded", "admitted", "spawn_asked", "starter_got", "planned", "child_started", "mounted",
                           "confined", "ready", "cloned", "execd",
                           "first_output", "exited", "terminal"}) {
    const auto it = steps.find(name);
    if (it == steps.end()) continue;
    const double m = median(it->second);
    fmt::print("    {:<13} {:8.0f}  (+{:.0f}, n={})\n", name, m, m - before, it->second.size());
    before = m;
  }
}

}  // namespace motor::bench
