// Which CPUs each job is pinned to. Whole cores (hyperthread siblings together) are claimed
// from the least-loaded first; when every core is claimed, claims overlap (the host is
// oversubscribed) and the claim says so. Pure: the topology is an input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace motor::runner {

struct CpuClaim {
  std::vector<int> cpus;    // logical CPU numbers, sorted
  bool overlapping = false; // shares a core with another running job
  std::string list() const; // "0-1,4" for cpuset.cpus
};

class CpuClaims {
 public:
  // cores[i] = the logical CPUs of core i (siblings together).
  explicit CpuClaims(std::vector<std::vector<int>> cores);
  // The host's topology from /sys/devices/system/cpu (online CPUs, thread_siblings_list).
  static CpuClaims from_sysfs();

  size_t core_count() const { return cores_.size(); }
  size_t cpu_count() const;
  // Claims enough whole cores for `cpus` logical CPUs (at least one core).
  CpuClaim claim(int64_t cpus);
  // Whether `cpus` can be claimed with at most `per_core` claims on any core (1: no overlap).
  bool can_claim(int64_t cpus, int64_t per_core) const;
  void release(const CpuClaim& claim);
  size_t claimed_cores() const;

 private:
  std::vector<std::vector<int>> cores_;
  std::vector<int> load_;  // claims per core
};

// Parses a kernel CPU list ("0-3,8,10-11").
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace motor::runner
