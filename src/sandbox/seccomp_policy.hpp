// The job's seccomp policy: one reviewed table of what a build never needs, compiled once in the
// parent (libseccomp) into a classic BPF program that the child only has to load.
#pragma once

#include <linux/filter.h>

#include <span>
#include <string>
#include <vector>

#include "motor/expected.hpp"

namespace motor::sandbox {

enum class SeccompRule {
  kDeny,                   // every call fails with EPERM
  kDenyNamespaceFlags,     // clone(2): EPERM when flags carry any CLONE_NEW* bit
  kEnosys,                 // fails with ENOSYS (clone3: its flags are in memory, which a filter
                           // cannot read; glibc falls back to clone(2), whose flags are filtered)
  kDenyTerminalInjection,  // ioctl(2): EPERM for TIOCSTI and TIOCLINUX (low 32 bits of the command)
  kDenyPersonalityChange,  // personality(2): EPERM unless PER_LINUX (0) or the query 0xffffffff
  kDenyVsockSockets,       // socket(2): EPERM for AF_VSOCK (low 32 bits of the domain)
  kDenyUeventNetlink,      // socket(2): EPERM for AF_NETLINK with protocol NETLINK_KOBJECT_UEVENT
};

struct SeccompEntry {
  const char* name;      // syscall name as libseccomp knows it
  int x86_64_nr;         // used when this libseccomp predates the syscall
  SeccompRule rule;
  const char* reason;    // why a build never needs it / what attack it stops
};

// The one reviewed list (seccomp_policy.cpp). Every other syscall is allowed; a syscall on
// another ABI (i386 via int 0x80, x32) kills the process.
std::span<const SeccompEntry> seccomp_policy_table();

struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// Builds and exports the filter. Fails (never weakens) if any entry cannot be expressed.
// `deny_sockets` adds socket(2) and socketpair(2) (EPERM): for host-side helpers that only ever
// touch files (qemu-img, mke2fs for VM disks), so a bug in one cannot reach any network or
// local daemon.
Expected<SeccompProgram> compile_seccomp_policy(bool deny_sockets = false);

// Child side: loads the program (no_new_privs must already be set). Returns 0 or an errno.
int load_seccomp_program(const SeccompProgram& program);

}  // namespace motor::sandbox
