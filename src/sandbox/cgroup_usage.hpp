// What a job used, read from its cgroup just before the cgroup goes: CPU time (cpu.stat on the
// unified hierarchy, which has it even without controllers; cpuacct on v1) and peak memory
// (memory.peak on v2, memory.max_usage_in_bytes on v1). For Buildbarn's resource_usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace motor::sandbox {

struct CgroupUsage {
  std::optional<int64_t> cpu_user_us, cpu_system_us;
  std::optional<int64_t> memory_peak_bytes;
};

// `directories`: JobCgroup::directories(). A file that is missing leaves its field empty.
CgroupUsage read_cgroup_usage(const std::vector<std::string>& directories);

}  // namespace motor::sandbox
