#include "vm/qemu_command.hpp"

namespace motor::vm {

std::string qemu_option_value(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    out += c;
    if (c == ',') out += ',';
  }
  return out;
}

std::vector<std::string> qemu_argv(const DomainSpec& s, const std::string& qmp_socket) {
  const auto v = qemu_option_value;
  const size_t vcpus = s.cpus.empty() ? 1 : s.cpus.size();
  std::vector<std::string> a = {
      s.emulator,
      "-name", "guest=" + v(s.name),
      "-S",
      "-no-user-config", "-nodefaults",
      "-machine", std::string("pc,usb=off,dump-guest-core=off,accel=") + (s.emulated ? "tcg" : "kvm"),
      "-m", std::to_string(s.memory_bytes >> 20),
      "-smp", std::to_string(vcpus),
      "-display", "none",
      "-nic", "none",
      "-no-reboot",
      "-action", "panic=shutdown",
      "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
      "-qmp", "unix:" + v(qmp_socket) + ",server=on,wait=off",
  };
  if (!s.kernel.empty()) {
    a.insert(a.end(), {"-kernel", s.kernel});
    if (!s.initrd.empty()) a.insert(a.end(), {"-initrd", s.initrd});
    if (!s.cmdline.empty()) a.insert(a.end(), {"-append", s.cmdline});
  }
  // vda: the overlay, whose backing file is the sealed image, opened read-only and never probed.
  a.insert(a.end(), {
      "-blockdev", "driver=file,node-name=sealed-file,read-only=on,filename=" + v(s.sealed_image),
      "-blockdev", "driver=qcow2,node-name=sealed,read-only=on,file=sealed-file",
      "-blockdev", "driver=file,node-name=overlay-file,cache.direct=on,filename=" + v(s.overlay),
      "-blockdev", "driver=qcow2,node-name=overlay,backing=sealed,file=overlay-file",
      "-device", "virtio-blk-pci,drive=overlay",
      "-blockdev", "driver=file,node-name=data-file,cache.direct=on,filename=" + v(s.data_disk),
      "-blockdev", "driver=raw,node-name=data,file=data-file",
      "-device", "virtio-blk-pci,drive=data",
  });
  if (!s.transfer_disk.empty()) {
    a.insert(a.end(), {
        "-blockdev", "driver=file,node-name=transfer-file,read-only=on,filename=" + v(s.transfer_disk),
        "-blockdev", "driver=raw,node-name=transfer,read-only=on,file=transfer-file",
        "-device", "virtio-blk-pci,drive=transfer",
    });
  }
  a.insert(a.end(), {
      "-chardev", "socket,id=agent,server=on,wait=off,path=" + v(s.agent_socket),
      "-device", "virtio-serial-pci",
      "-device", "virtserialport,chardev=agent,name=org.qemu.guest_agent.0",
  });
  if (!s.console_log.empty()) a.insert(a.end(), {"-chardev", "file,id=console,path=" + v(s.console_log), "-serial", "chardev:console"});
  return a;
}

}  // namespace motor::vm
