// What a job's end reads of its cgroups (sandbox/cgroup_usage.hpp), over directories laid out as
// the hybrid layout's (v1 controllers, then the unified one) and as pure v2's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "sandbox/cgroup_usage.hpp"
#include "temp_dir.hpp"

namespace motor::sandbox {
namespace {

class CgroupUsageRead : public test::TempDirTest {
 protected:
  std::string dir(const std::string& name) {
    const std::string d = dir_ + "/" + name;
    std::filesystem::create_directories(d);
    return d;
  }
  static void put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
};

TEST_F(CgroupUsageRead, TheHybridLayoutsV1MemoryPeakAndUnifiedCpuStat) {
  const std::string memory = dir("memory"), pids = dir("pids"), unified = dir("unified");
  put(memory + "/memory.max_usage_in_bytes", "123456\n");
  put(unified + "/cpu.stat", "usage_usec 10\nuser_usec 4\nsystem_usec 6\nnr_periods 0\n");
  const CgroupUsage u = read_cgroup_usage({memory, pids, unified});
  EXPECT_EQ(u.memory_peak_bytes, 123456);
  EXPECT_EQ(u.cpu_user_us, 4);
  EXPECT_EQ(u.cpu_system_us, 6);
}

TEST_F(CgroupUsageRead, V1CpuacctIsInClockTicks) {
  const std::string cpuacct = dir("cpuacct");
  put(cpuacct + "/cpuacct.stat", "user 5\nsystem 7\n");
  const int64_t ticks = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
  const CgroupUsage u = read_cgroup_usage({cpuacct});
  EXPECT_EQ(u.cpu_user_us, 5 * 1000000 / ticks);
  EXPECT_EQ(u.cpu_system_us, 7 * 1000000 / ticks);
  EXPECT_FALSE(u.memory_peak_bytes);
}

TEST_F(CgroupUsageRead, PureV2PeakAndMissingOrMalformedFilesLeaveFieldsEmpty) {
  const std::string v2 = dir("v2");
  put(v2 + "/memory.peak", "99\n");
  put(v2 + "/cpu.stat", "user_usec lots\n");
  const CgroupUsage u = read_cgroup_usage({v2});
  EXPECT_EQ(u.memory_peak_bytes, 99);
  EXPECT_FALSE(u.cpu_user_us);
  EXPECT_FALSE(u.cpu_system_us);
  EXPECT_FALSE(read_cgroup_usage({dir_ + "/gone"}).memory_peak_bytes);
}

}  // namespace
}  // namespace motor::sandbox
