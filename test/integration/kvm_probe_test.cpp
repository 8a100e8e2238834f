// The KVM probe (vm/kvm_probe.hpp) against device nodes of the test's own making: it must answer
// for motor-qemu (its uid and groups), not for root, and say why KVM cannot be used.
#include <grp.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "kvm_node.hpp"
#include "sandbox/accounts.hpp"
#include "vm/kvm_probe.hpp"

namespace motor::test {
namespace {

class KvmProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    auto qemu = sandbox::lookup_unprivileged_account("motor-qemu");
    MOTOR_REQUIRE(qemu.ok(), "the motor-qemu account is missing (scripts/setup)");
    qemu_ = *qemu;
  }
  sandbox::Account qemu_;
};

TEST_F(KvmProbe, NodeOnlyRootCanOpenIsUnusableForQemu) {
  // The case of a fresh machine without udev: crw------- root root.
  KvmNode node(0600, 0);
  ASSERT_TRUE(node.made());
  auto why = vm::kvm_unusable(qemu_, {.device = node.path()});
  ASSERT_TRUE(why) << "root can open this node; motor-qemu cannot: the probe must run as motor-qemu";
  EXPECT_NE(why->find("as motor-qemu"), std::string::npos) << *why;
  EXPECT_NE(why->find("cannot open"), std::string::npos) << *why;
  EXPECT_NE(why->find("Permission denied"), std::string::npos) << *why;
}

TEST_F(KvmProbe, KvmGroupGivesQemuTheDevice) {
  // As on Debian: crw-rw---- root kvm, motor-qemu in group kvm (scripts/setup adds it).
  group* kvm = getgrnam("kvm");
  MOTOR_REQUIRE(kvm != nullptr, "no kvm group on this host");
  bool member = false;
  for (char** m = kvm->gr_mem; *m; ++m) member = member || qemu_.name == *m;
  MOTOR_REQUIRE(member, "motor-qemu is not in group kvm (scripts/setup adds it)");
  KvmNode node(0660, kvm->gr_gid);
  ASSERT_TRUE(node.made());
  auto why = vm::kvm_unusable(qemu_, {.device = node.path()});
  // The device opened and ran the test guest; what remains is the host's KVM itself. On a host
  // with no KVM driver at all (no /dev/kvm of its own; seen on one machine of this kind) the
  // open gets past the permission check and fails in the driver lookup: ENODEV, not EACCES.
  if (why) {
    const bool no_driver = why->find("(No such device)") != std::string::npos;
    EXPECT_TRUE(no_driver || why->find("cannot open") == std::string::npos) << *why;
    EXPECT_EQ(why->find("Permission denied"), std::string::npos) << *why;
  }
}

// What serves /dev/kvm decides whether a stock kernel boots: cpuinfo and sys/module files of the
// test's making, the device itself readable by everyone.
TEST_F(KvmProbe, HostFactsDecideWhetherAStockGuestBoots) {
  KvmNode node(0666, 0);
  ASSERT_TRUE(node.made());
  const std::string dir = make_temp_dir();
  write_file(dir + "/cpuinfo-plain", "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr hypervisor\n");
  write_file(dir + "/cpuinfo-vmx", "processor\t: 0\nflags\t\t: fpu vme de vmx pse tsc msr\n");
  std::filesystem::create_directories(dir + "/modules-pvm/kvm_pvm");
  std::filesystem::create_directories(dir + "/modules-stock/kvm_intel");

  auto no_vmx = vm::kvm_unusable(qemu_, {.device = node.path(), .cpuinfo = dir + "/cpuinfo-plain", .sys_module = dir + "/modules-stock"});
  auto pvm = vm::kvm_unusable(qemu_, {.device = node.path(), .cpuinfo = dir + "/cpuinfo-vmx", .sys_module = dir + "/modules-pvm"});
  auto stock = vm::kvm_unusable(qemu_, {.device = node.path(), .cpuinfo = dir + "/cpuinfo-vmx", .sys_module = dir + "/modules-stock"});
  remove_tree(dir);
  if (stock && stock->find("as motor-qemu") != std::string::npos) {
    // This host's KVM does not run even the tiny real-mode guest: the device check decides first.
    EXPECT_TRUE(no_vmx && pvm) << *stock;
    return;
  }
  EXPECT_FALSE(stock) << *stock;
  ASSERT_TRUE(no_vmx);
  EXPECT_NE(no_vmx->find("no vmx or svm"), std::string::npos) << *no_vmx;
  ASSERT_TRUE(pvm);
  EXPECT_NE(pvm->find("PVM"), std::string::npos) << *pvm;
}

TEST_F(KvmProbe, NotACharacterDevice) {
  const std::string dir = make_temp_dir();
  write_file(dir + "/kvm", "");
  auto why = vm::kvm_unusable(qemu_, {.device = dir + "/kvm"});
  auto missing = vm::kvm_unusable(qemu_, {.device = dir + "/none"});
  remove_tree(dir);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("not a character device"), std::string::npos) << *why;
  ASSERT_TRUE(missing);
  EXPECT_NE(missing->find("No such file"), std::string::npos) << *missing;
}

}  // namespace
}  // namespace motor::test
