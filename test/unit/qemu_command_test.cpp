// QEMU's command line when Motor starts QEMU in a transient unit (src/vm/qemu_command): paused,
// no network and no default device, QEMU's own seccomp, the disks in the guest's order with the
// sealed image read-only, the guest agent's socket.
#include "vm/qemu_command.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace {

using motor::vm::qemu_argv;

motor::vm::DomainSpec spec() {
  motor::vm::DomainSpec s;
  s.name = "motor-j1";
  s.emulated = true;
  s.cpus = {2, 3};
  s.memory_bytes = int64_t{1} << 30;
  s.overlay = "/var/lib/motor/vm/j1/system.qcow2";
  s.sealed_image = "/srv/images/windows.qcow2";
  s.data_disk = "/var/lib/motor/vm-data/alice/ws.img";
  s.transfer_disk = "/var/lib/motor/vm/j1/transfer.img";
  s.agent_socket = "/var/lib/motor/vm/j1/agent.sock";
  return s;
}

// The value after `option` (the first one), or "" when the option is not there.
std::string after(const std::vector<std::string>& a, const std::string& option) {
  auto it = std::find(a.begin(), a.end(), option);
  return it == a.end() || it + 1 == a.end() ? "" : *(it + 1);
}

std::vector<std::string> values_of(const std::vector<std::string>& a, const std::string& option) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    if (a[i] == option) out.push_back(a[i + 1]);
  }
  return out;
}

bool has(const std::vector<std::string>& a, const std::string& arg) { return std::find(a.begin(), a.end(), arg) != a.end(); }

TEST(QemuCommand, StartsPausedWithNothingByDefault) {
  const auto a = qemu_argv(spec(), "/q.sock");
  EXPECT_EQ(a.front(), "/usr/bin/qemu-system-x86_64");
  EXPECT_TRUE(has(a, "-S"));
  EXPECT_TRUE(has(a, "-nodefaults"));
  EXPECT_TRUE(has(a, "-no-user-config"));
  EXPECT_TRUE(has(a, "-no-reboot"));
  EXPECT_EQ(after(a, "-nic"), "none");
  EXPECT_EQ(after(a, "-display"), "none");
}

TEST(QemuCommand, HasNoNetworkOrHostDevice) {
  for (const auto& arg : qemu_argv(spec(), "/q.sock")) {
    EXPECT_EQ(arg.find("netdev"), std::string::npos) << arg;
    EXPECT_EQ(arg.find("virtio-net"), std::string::npos) << arg;
    EXPECT_EQ(arg.find("vfio"), std::string::npos) << arg;
    EXPECT_EQ(arg.find("usb-host"), std::string::npos) << arg;
  }
}

TEST(QemuCommand, UsesQemusOwnSeccompFilter) {
  EXPECT_EQ(after(qemu_argv(spec(), "/q.sock"), "-sandbox"),
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
}

TEST(QemuCommand, AcceleratorFollowsTheSpec) {
  auto s = spec();
  EXPECT_NE(after(qemu_argv(s, "/q"), "-machine").find("accel=tcg"), std::string::npos);
  s.emulated = false;
  EXPECT_NE(after(qemu_argv(s, "/q"), "-machine").find("accel=kvm"), std::string::npos);
}

TEST(QemuCommand, MemoryAndVcpusFromTheClaim) {
  const auto a = qemu_argv(spec(), "/q");
  EXPECT_EQ(after(a, "-m"), "1024");
  EXPECT_EQ(after(a, "-smp"), "2");
}

TEST(QemuCommand, SealedImageIsReadOnlyAndDisksAreInTheGuestsOrder) {
  const auto blockdevs = values_of(qemu_argv(spec(), "/q"), "-blockdev");
  ASSERT_EQ(blockdevs.size(), 8u);
  EXPECT_EQ(blockdevs[0], "driver=file,node-name=sealed-file,read-only=on,filename=/srv/images/windows.qcow2");
  EXPECT_NE(blockdevs[1].find("read-only=on"), std::string::npos);
  EXPECT_NE(blockdevs[3].find("backing=sealed"), std::string::npos);
  EXPECT_NE(blockdevs[6].find("read-only=on,filename=/var/lib/motor/vm/j1/transfer.img"), std::string::npos);
  EXPECT_EQ(values_of(qemu_argv(spec(), "/q"), "-device")[0], "virtio-blk-pci,drive=overlay");
  EXPECT_EQ(values_of(qemu_argv(spec(), "/q"), "-device")[1], "virtio-blk-pci,drive=data");
  EXPECT_EQ(values_of(qemu_argv(spec(), "/q"), "-device")[2], "virtio-blk-pci,drive=transfer");
}

TEST(QemuCommand, NoTransferDiskWithoutOne) {
  auto s = spec();
  s.transfer_disk.clear();
  EXPECT_EQ(values_of(qemu_argv(s, "/q"), "-blockdev").size(), 6u);
}

TEST(QemuCommand, GuestAgentAndMonitorSockets) {
  const auto a = qemu_argv(spec(), "/var/lib/motor/vm/j1/qmp.sock");
  EXPECT_EQ(after(a, "-qmp"), "unix:/var/lib/motor/vm/j1/qmp.sock,server=on,wait=off");
  EXPECT_EQ(after(a, "-chardev"), "socket,id=agent,server=on,wait=off,path=/var/lib/motor/vm/j1/agent.sock");
  EXPECT_TRUE(has(a, "virtserialport,chardev=agent,name=org.qemu.guest_agent.0"));
}

TEST(QemuCommand, CommaInAPathCannotAddAnOption) {
  auto s = spec();
  s.data_disk = "/d/x,read-only=off,filename=/etc/shadow";
  const auto blockdevs = values_of(qemu_argv(s, "/q"), "-blockdev");
  EXPECT_EQ(blockdevs[4], "driver=file,node-name=data-file,cache.direct=on,filename=/d/x,,read-only=off,,filename=/etc/shadow");
}

TEST(QemuCommand, DirectKernelBootOnlyWhenGiven) {
  auto s = spec();
  EXPECT_EQ(after(qemu_argv(s, "/q"), "-kernel"), "");
  s.kernel = "/g/vmlinuz";
  s.initrd = "/g/initrd.img";
  s.cmdline = "console=ttyS0";
  const auto a = qemu_argv(s, "/q");
  EXPECT_EQ(after(a, "-kernel"), "/g/vmlinuz");
  EXPECT_EQ(after(a, "-initrd"), "/g/initrd.img");
  EXPECT_EQ(after(a, "-append"), "console=ttyS0");
}

}  // namespace
