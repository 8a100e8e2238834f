// Parsers behind QEMU's confinement checks (src/vm/qemu_confinement): what /proc says about the
// QEMU process. The checks themselves run against real QEMU in test/integration/vm_job_test.cpp.
#include "vm/qemu_confinement.hpp"

#include <gtest/gtest.h>

namespace {

TEST(QemuConfinement, NetDevInterfaces) {
  const std::string only_lo =
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
      "    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n";
  EXPECT_EQ(motor::vm::parse_net_dev_interfaces(only_lo), std::vector<std::string>{"lo"});
  const std::string with_eth = only_lo + "  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n";
  EXPECT_EQ(motor::vm::parse_net_dev_interfaces(with_eth), (std::vector<std::string>{"lo", "eth0"}));
}

TEST(QemuConfinement, CgroupPathOfAController) {
  const std::string v1 =
      "9:name=systemd:/\n8:pids:/motor/vm-j1\n4:memory:/machine/qemu-1-motor-j1.libvirt-qemu\n"
      "3:cpuset:/machine/qemu-1-motor-j1.libvirt-qemu/emulator\n1:cpu,cpuacct:/machine/x\n0::/machine/u\n";
  EXPECT_EQ(motor::vm::cgroup_path_of(v1, "memory"), "/machine/qemu-1-motor-j1.libvirt-qemu");
  EXPECT_EQ(motor::vm::cgroup_path_of(v1, "pids"), "/motor/vm-j1");
  EXPECT_EQ(motor::vm::cgroup_path_of(v1, "cpuacct"), "/machine/x");
  EXPECT_EQ(motor::vm::cgroup_path_of(v1, ""), "/machine/u");
  EXPECT_EQ(motor::vm::cgroup_path_of(v1, "blkio"), "");
}

}  // namespace
