// The libvirt domain of one VM job, as XML (DESIGN.md "A Windows job"). Pure: no libvirt here.
//
// What the XML guarantees, and the unit tests check:
//  - no <interface> and no other device that reaches a network (no USB redirection, no
//    graphics, no sound, no default devices beyond the machine's own);
//  - QEMU runs as the given account through a static DAC label (motor-qemu);
//  - the vCPUs are the job's CPU claim, each pinned to one claimed CPU, the emulator too;
//  - disks: the job's qcow2 overlay over the sealed image (the image itself is never labelled,
//    so libvirt never chowns it to the QEMU account), the workspace's persistent data disk, and
//    the read-only transfer disk the host built;
//  - the guest agent on a virtio-serial channel bound to a Unix socket the runner connects to.
//
// The memory hard limit is not in the XML: libvirt 9 also turns an XML <memtune><hard_limit>
// into QEMU's RLIMIT_MEMLOCK (setrlimit in the forked child), and raising a hard rlimit needs
// CAP_SYS_RESOURCE, which root on these machines lacks: the create fails with "cannot limit
// locked memory of process N to BYTES: Operation not permitted". The runner sets the same limit
// with virDomainSetMemoryParameters while the domain is still paused (see motor-vm-helper; it
// writes only the memory cgroup), and checks it in QEMU's memory cgroup before the guest runs
// an instruction (docs/windows-jobs.md, step 3). memtune_xml() renders the element for hosts
// and tests that want it in the definition.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace motor::vm {

struct DomainSpec {
  std::string name;                 // transient domain name, unique on the host
  bool emulated = false;            // true: TCG (type='qemu'); false: KVM
  std::vector<int> cpus;            // the job's CPU claim: one vCPU per CPU, pinned
  int64_t memory_bytes = 0;         // guest RAM
  int64_t hard_limit_bytes = 0;     // QEMU's memory cgroup limit (guest RAM + QEMU's overhead)
  uid_t qemu_uid = 0;               // the motor-qemu account
  gid_t qemu_gid = 0;
  std::string overlay;              // qcow2 overlay, writable, deleted after the job
  std::string sealed_image;         // the overlay's qcow2 backing file, never written
  std::string data_disk;            // the workspace's persistent data disk (raw), writable
  std::string transfer_disk;        // read-only raw disk the host built; empty = none
  std::string agent_socket;         // Unix socket QEMU binds for the guest agent channel
  std::string console_log;          // the guest's serial console, written to a file; empty = none
  // Direct kernel boot (the Linux test guest); all empty = boot the system disk (Windows).
  std::string kernel, initrd, cmdline;
  std::string emulator = "/usr/bin/qemu-system-x86_64";
};

// Escapes text for XML attribute and element content.
std::string xml_escape(const std::string& text);

std::string domain_xml(const DomainSpec& spec);

// <memtune><hard_limit unit='KiB'>…</hard_limit></memtune> for spec.hard_limit_bytes.
std::string memtune_xml(const DomainSpec& spec);

}  // namespace motor::vm
