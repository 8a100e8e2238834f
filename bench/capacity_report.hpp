// The capacity bench's report (capacity_report.cpp): the tables, the verdicts and the rule of
// thumb on stdout; capacity.json, capacity.dat, capacity.gp and, with gnuplot, capacity.svg.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capacity_level.hpp"

namespace motor::bench::capacity {

// What the run measured on.
struct HostFacts {
  long online = 0;
  int usable_cpus = 0;
  int64_t mem_total_kib = 0, mem_avail_kib = 0;
  std::string load_before, load_after, kernel, model, cgroup_layout;
};

struct RunnerFacts {
  std::string version, config;
  double rss_idle = 0, rss_end = 0;
};

struct Report {
  const std::vector<System>& systems;
  const std::vector<int>& levels;
  double seconds = 0;
  const std::vector<Level>& results;
  HostFacts host;
  RunnerFacts runner;
  std::string bwrap_status, podman_status, out_dir;

  std::vector<const Level*> of(const std::string& system) const;  // its levels, in order
  const Level* at(const std::string& system, int clients) const;
  double cores() const;  // usable CPUs, or online ones where affinity is unknown
};

struct Verdict {
  std::string system;
  int saturated = 0, bounded = 0;
  double peak = 0, peak_x = 0;
  int peak_at = 0;
};

struct RuleOfThumb {
  double jobs_per_core_thr = 0, jobs_per_core_lat = 0, runner_mib_per_job = 0, cpu_pct_per_job = 0;
  std::string text, assumptions;
};

void print_and_write_report(const Report& report);

}  // namespace motor::bench::capacity
