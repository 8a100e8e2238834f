// Can QEMU, running as the QEMU account, use KVM on this host? Asked of the kernel as that
// account, not of libvirt: libvirt probes as root and reports KVM where motor-qemu cannot open
// /dev/kvm, or where /dev/kvm is a paravirtual variant that cannot boot a stock guest
// (MACHINE.md "Does not work").
#pragma once

#include <optional>
#include <string>

#include "sandbox/accounts.hpp"

namespace motor::vm {

// Where the probe looks; tests point `device` at a node of their own making.
struct KvmProbePaths {
  std::string device = "/dev/kvm";
  std::string cpuinfo = "/proc/cpuinfo";
  std::string sys_module = "/sys/module";
};

// nullopt when KVM is usable by `account`; otherwise why not, for the operator. Checks, in order:
// the device is a character device; a child with the account's uid, gid and supplementary groups
// opens it read-write, gets KVM API version 12, creates a VM and runs a 5-byte real-mode guest
// (an OUT then HLT, as a stock boot's first code is real mode) to its HLT within 5 s; the CPU
// offers hardware virtualization (vmx or svm in cpuinfo) and KVM is not the PVM variant
// (sys_module/kvm_pvm), which runs only guests built for it. Blocks up to about 5 s (a fork and
// a tiny guest run, normally a few milliseconds): called once at start.
std::optional<std::string> kvm_unusable(const sandbox::Account& account, const KvmProbePaths& paths = {});

}  // namespace motor::vm
