#include "vm/domain_xml.hpp"

#include <fmt/format.h>

namespace motor::vm {

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&apos;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string memtune_xml(const DomainSpec& spec) {
  return fmt::format("<memtune><hard_limit unit='KiB'>{}</hard_limit></memtune>", spec.hard_limit_bytes / 1024);
}

std::string domain_xml(const DomainSpec& s) {
  std::string cpuset;
  for (size_t i = 0; i < s.cpus.size(); ++i) cpuset += (i ? "," : "") + std::to_string(s.cpus[i]);
  std::string x;
  x += fmt::format("<domain type='{}'>\n", s.emulated ? "qemu" : "kvm");
  x += fmt::format("  <name>{}</name>\n", xml_escape(s.name));
  x += fmt::format("  <memory unit='KiB'>{}</memory>\n", s.memory_bytes / 1024);
  x += fmt::format("  <vcpu placement='static' cpuset='{}'>{}</vcpu>\n", cpuset, s.cpus.size());
  x += "  <cputune>\n";
  for (size_t i = 0; i < s.cpus.size(); ++i) x += fmt::format("    <vcpupin vcpu='{}' cpuset='{}'/>\n", i, s.cpus[i]);
  x += fmt::format("    <emulatorpin cpuset='{}'/>\n", cpuset);
  x += "  </cputune>\n";
  x += "  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n";
  if (!s.kernel.empty()) {
    x += fmt::format("    <kernel>{}</kernel>\n", xml_escape(s.kernel));
    if (!s.initrd.empty()) x += fmt::format("    <initrd>{}</initrd>\n", xml_escape(s.initrd));
    if (!s.cmdline.empty()) x += fmt::format("    <cmdline>{}</cmdline>\n", xml_escape(s.cmdline));
  } else {
    x += "    <boot dev='hd'/>\n";
  }
  x += "  </os>\n";
  x += "  <features><acpi/></features>\n";
  // A guest that powers off, reboots or crashes ends its job: nothing restarts it.
  x += "  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>destroy</on_reboot>\n  <on_crash>destroy</on_crash>\n";
  x += fmt::format("  <seclabel type='static' model='dac' relabel='yes'><label>+{}:+{}</label></seclabel>\n", s.qemu_uid,
                   s.qemu_gid);
  x += "  <devices>\n";
  x += fmt::format("    <emulator>{}</emulator>\n", xml_escape(s.emulator));
  // The system disk: the overlay; its backing chain is spelled out so libvirt does not probe it,
  // and the sealed image is never relabelled (it stays root-owned and read-only).
  x += "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2' cache='none'/>\n";
  x += fmt::format("      <source file='{}'/>\n", xml_escape(s.overlay));
  x += fmt::format(
      "      <backingStore type='file'><format type='qcow2'/><source file='{}'><seclabel model='dac' "
      "relabel='no'/></source><backingStore/></backingStore>\n",
      xml_escape(s.sealed_image));
  x += "      <target dev='vda' bus='virtio'/>\n    </disk>\n";
  x += "    <disk type='file' device='disk'>\n      <driver name='qemu' type='raw' cache='none'/>\n";
  x += fmt::format("      <source file='{}'/>\n", xml_escape(s.data_disk));
  x += "      <target dev='vdb' bus='virtio'/>\n    </disk>\n";
  if (!s.transfer_disk.empty()) {
    x += "    <disk type='file' device='disk'>\n      <driver name='qemu' type='raw'/>\n";
    x += fmt::format("      <source file='{}'><seclabel model='dac' relabel='no'/></source>\n", xml_escape(s.transfer_disk));
    x += "      <target dev='vdc' bus='virtio'/>\n      <readonly/>\n    </disk>\n";
  }
  x += "    <channel type='unix'>\n";
  x += fmt::format("      <source mode='bind' path='{}'/>\n", xml_escape(s.agent_socket));
  x += "      <target type='virtio' name='org.qemu.guest_agent.0'/>\n    </channel>\n";
  if (!s.console_log.empty()) {
    x += fmt::format("    <serial type='file'><source path='{}'/><target port='0'/></serial>\n", xml_escape(s.console_log));
  }
  x += "    <controller type='usb' model='none'/>\n";
  x += "    <memballoon model='none'/>\n";
  x += "  </devices>\n";
  x += "</domain>\n";
  return x;
}

}  // namespace motor::vm
