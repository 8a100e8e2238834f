// The VM job's libvirt domain XML (src/vm/domain_xml): what reaches the host, what is pinned,
// who QEMU runs as, which disks are writable.
#include "vm/domain_xml.hpp"

#include <gtest/gtest.h>

namespace {

motor::vm::DomainSpec spec() {
  motor::vm::DomainSpec s;
  s.name = "motor-j1";
  s.emulated = false;
  s.cpus = {2, 3};
  s.memory_bytes = int64_t{1} << 30;
  s.hard_limit_bytes = (int64_t{1} << 30) + (int64_t{256} << 20);
  s.qemu_uid = 995;
  s.qemu_gid = 993;
  s.overlay = "/var/lib/motor/vm/j1/system.qcow2";
  s.sealed_image = "/srv/images/windows.qcow2";
  s.data_disk = "/var/lib/motor/vm-data/alice/ws/data.img";
  s.transfer_disk = "/var/lib/motor/vm/j1/transfer.img";
  s.agent_socket = "/var/lib/motor/vm/j1/agent.sock";
  return s;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}

TEST(DomainXml, HasNoNetworkDevice) {
  const std::string x = motor::vm::domain_xml(spec());
  EXPECT_EQ(x.find("<interface"), std::string::npos);
  EXPECT_EQ(x.find("<graphics"), std::string::npos);
  EXPECT_EQ(x.find("<redirdev"), std::string::npos);
  EXPECT_EQ(x.find("<hostdev"), std::string::npos);
  EXPECT_EQ(x.find("<filesystem"), std::string::npos);
  EXPECT_NE(x.find("<controller type='usb' model='none'/>"), std::string::npos);
}

TEST(DomainXml, KvmUnlessEmulationIsAsked) {
  auto s = spec();
  EXPECT_NE(motor::vm::domain_xml(s).find("<domain type='kvm'>"), std::string::npos);
  s.emulated = true;
  EXPECT_NE(motor::vm::domain_xml(s).find("<domain type='qemu'>"), std::string::npos);
}

TEST(DomainXml, RunsAsTheQemuAccountThroughAStaticDacLabel) {
  const std::string x = motor::vm::domain_xml(spec());
  EXPECT_NE(x.find("<seclabel type='static' model='dac' relabel='yes'><label>+995:+993</label></seclabel>"),
            std::string::npos);
}

TEST(DomainXml, PinsOneVcpuPerClaimedCpuAndTheEmulator) {
  const std::string x = motor::vm::domain_xml(spec());
  EXPECT_NE(x.find("<vcpu placement='static' cpuset='2,3'>2</vcpu>"), std::string::npos);
  EXPECT_NE(x.find("<vcpupin vcpu='0' cpuset='2'/>"), std::string::npos);
  EXPECT_NE(x.find("<vcpupin vcpu='1' cpuset='3'/>"), std::string::npos);
  EXPECT_NE(x.find("<emulatorpin cpuset='2,3'/>"), std::string::npos);
  EXPECT_NE(x.find("<memory unit='KiB'>1048576</memory>"), std::string::npos);
}

TEST(DomainXml, MemtuneHardLimit) {
  EXPECT_EQ(motor::vm::memtune_xml(spec()), "<memtune><hard_limit unit='KiB'>1310720</hard_limit></memtune>");
}

TEST(DomainXml, DisksOverlayOverUnlabelledSealedImageDataAndReadOnlyTransfer) {
  const std::string x = motor::vm::domain_xml(spec());
  EXPECT_EQ(count(x, "<disk "), 3u);
  EXPECT_NE(x.find("<source file='/var/lib/motor/vm/j1/system.qcow2'/>"), std::string::npos);
  // The sealed image: the overlay's backing file, never relabelled to the QEMU account.
  EXPECT_NE(x.find("<source file='/srv/images/windows.qcow2'><seclabel model='dac' relabel='no'/></source>"),
            std::string::npos);
  EXPECT_NE(x.find("<source file='/var/lib/motor/vm-data/alice/ws/data.img'/>"), std::string::npos);
  const auto transfer = x.find("transfer.img");
  ASSERT_NE(transfer, std::string::npos);
  const auto transfer_end = x.find("</disk>", transfer);
  EXPECT_NE(x.substr(transfer, transfer_end - transfer).find("<readonly/>"), std::string::npos);
  EXPECT_EQ(count(x, "<readonly/>"), 1u);

  auto s = spec();
  s.transfer_disk.clear();
  EXPECT_EQ(count(motor::vm::domain_xml(s), "<disk "), 2u);
}

TEST(DomainXml, GuestAgentOnAVirtioSerialUnixChannel) {
  const std::string x = motor::vm::domain_xml(spec());
  EXPECT_NE(x.find("<channel type='unix'>\n      <source mode='bind' path='/var/lib/motor/vm/j1/agent.sock'/>\n"
                   "      <target type='virtio' name='org.qemu.guest_agent.0'/>"),
            std::string::npos);
}

TEST(DomainXml, BootsTheSystemDiskOrAGivenKernel) {
  auto s = spec();
  EXPECT_NE(motor::vm::domain_xml(s).find("<boot dev='hd'/>"), std::string::npos);
  s.kernel = "/k/vmlinuz";
  s.initrd = "/k/initrd.img";
  s.cmdline = "console=ttyS0";
  const std::string x = motor::vm::domain_xml(s);
  EXPECT_NE(x.find("<kernel>/k/vmlinuz</kernel>"), std::string::npos);
  EXPECT_NE(x.find("<initrd>/k/initrd.img</initrd>"), std::string::npos);
  EXPECT_EQ(x.find("<boot "), std::string::npos);
}

TEST(DomainXml, EscapesEveryPath) {
  auto s = spec();
  s.overlay = "/tmp/a'b<c>&\"d/system.qcow2";
  const std::string x = motor::vm::domain_xml(s);
  EXPECT_NE(x.find("/tmp/a&apos;b&lt;c&gt;&amp;&quot;d/system.qcow2"), std::string::npos);
  EXPECT_EQ(x.find("a'b"), std::string::npos);
}

}  // namespace
