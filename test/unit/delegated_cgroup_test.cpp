// Where the runner finds its own cgroup v2 path (for Delegate=yes on a pure v2 host).
#include <gtest/gtest.h>

#include "runner/delegated_cgroup.hpp"

namespace motor::runner {
namespace {

TEST(DelegatedCgroup, UnifiedPathIsTheZeroLine) {
  EXPECT_EQ(unified_cgroup_path("0::/system.slice/motor-runner.service\n"), "/system.slice/motor-runner.service");
  EXPECT_EQ(unified_cgroup_path("12:pids:/system.slice/x.service\n1:name=systemd:/a\n0::/system.slice/y.service\n"),
            "/system.slice/y.service");
  EXPECT_EQ(unified_cgroup_path("4:memory:/a\n"), "");
  EXPECT_EQ(unified_cgroup_path(""), "");
}

}  // namespace
}  // namespace motor::runner
