#include "sandbox/seccomp_policy.hpp"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <linux/netlink.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "motor/unique_fd.hpp"

namespace motor::sandbox {
namespace {

using R = SeccompRule;

// Reviewed list. Keep the reason honest: what would a job do with this call that a build never
// needs? Numbers are x86_64, used only where libseccomp 2.5.4 does not know the name.
constexpr std::array kTable = {
    // Kernel keyring: shared per-user kernel state, a long history of kernel bugs, and a place
    // where the runner's or another job's keys could live.
    SeccompEntry{"add_key", 248, R::kDeny, "kernel keyring: kernel attack surface, cross-job key state"},
    SeccompEntry{"request_key", 249, R::kDeny, "kernel keyring: kernel attack surface, cross-job key state"},
    SeccompEntry{"keyctl", 250, R::kDeny, "kernel keyring: kernel attack surface, cross-job key state"},
    // eBPF and perf: in-kernel program loading and hardware counters; side channels and exploits.
    SeccompEntry{"bpf", 321, R::kDeny, "eBPF loader: verifier bugs are a classic kernel exploit path"},
    SeccompEntry{"perf_event_open", 298, R::kDeny, "perf counters: side channels, kernel exploit history"},
    // userfaultfd lets a job stall the kernel mid-copy at will: the standard race-widener.
    SeccompEntry{"userfaultfd", 323, R::kDeny, "stalls kernel copies at will: widens kernel race exploits"},
    // Tracing and cross-process memory access: nothing in a build needs to inspect a sibling.
    SeccompEntry{"ptrace", 101, R::kDeny, "tracing any process; builds do not debug"},
    SeccompEntry{"process_vm_readv", 310, R::kDeny, "reads another process's memory (ptrace-class access)"},
    SeccompEntry{"process_vm_writev", 311, R::kDeny, "writes another process's memory (ptrace-class access)"},
    SeccompEntry{"pidfd_getfd", 438, R::kDeny, "steals another process's file descriptor (ptrace-class access)"},
    SeccompEntry{"kcmp", 312, R::kDeny, "compares other processes' kernel objects (ptrace-class; leaks kernel pointers' order)"},
    // The mount table is the sandbox: no call may change it, old API or new.
    SeccompEntry{"mount", 165, R::kDeny, "changes the mount table that is the sandbox"},
    SeccompEntry{"umount2", 166, R::kDeny, "could uncover what the sandbox's mounts hide"},
    SeccompEntry{"pivot_root", 155, R::kDeny, "changes the root the sandbox built"},
    SeccompEntry{"chroot", 161, R::kDeny, "changes the root; the classic chroot escape needs it"},
    SeccompEntry{"move_mount", 429, R::kDeny, "new mount API: changes the mount table"},
    SeccompEntry{"open_tree", 428, R::kDeny, "new mount API: clones mounts"},
    SeccompEntry{"fsopen", 430, R::kDeny, "new mount API: creates filesystems"},
    SeccompEntry{"fsconfig", 431, R::kDeny, "new mount API: configures filesystems"},
    SeccompEntry{"fsmount", 432, R::kDeny, "new mount API: creates mounts"},
    SeccompEntry{"fspick", 433, R::kDeny, "new mount API: reconfigures existing mounts"},
    SeccompEntry{"mount_setattr", 442, R::kDeny, "new mount API: changes mount flags (ro, nosuid)"},
    SeccompEntry{"open_tree_attr", 467, R::kDeny, "new mount API (6.15): clones mounts with new flags"},
    // New namespaces: user namespaces hand an unprivileged job a root-like capability set over
    // fresh kernel objects, the source of many local privilege escalations.
    SeccompEntry{"unshare", 272, R::kDeny, "new namespaces (user ns = capabilities over kernel attack surface)"},
    SeccompEntry{"setns", 308, R::kDeny, "joins other namespaces"},
    SeccompEntry{"clone", 56, R::kDenyNamespaceFlags, "clone with CLONE_NEW*: same as unshare; plain fork/threads allowed"},
    SeccompEntry{"clone3", 435, R::kEnosys, "flags are behind a pointer; ENOSYS makes glibc fall back to clone"},
    // Replacing or extending the running kernel.
    SeccompEntry{"kexec_load", 246, R::kDeny, "boots another kernel"},
    SeccompEntry{"kexec_file_load", 320, R::kDeny, "boots another kernel"},
    SeccompEntry{"init_module", 175, R::kDeny, "loads kernel code"},
    SeccompEntry{"finit_module", 313, R::kDeny, "loads kernel code"},
    SeccompEntry{"delete_module", 176, R::kDeny, "unloads kernel code"},
    // Opens files by handle, bypassing the mount tree ("shocker" container escape).
    SeccompEntry{"open_by_handle_at", 304, R::kDeny, "opens host files by handle, bypassing the mount tree"},
    // Host-wide administration.
    SeccompEntry{"swapon", 167, R::kDeny, "host swap configuration"},
    SeccompEntry{"swapoff", 168, R::kDeny, "host swap configuration"},
    SeccompEntry{"reboot", 169, R::kDeny, "reboots the host (or the PID namespace)"},
    SeccompEntry{"acct", 163, R::kDeny, "host process accounting"},
    SeccompEntry{"quotactl", 179, R::kDeny, "host disk quotas"},
    SeccompEntry{"quotactl_fd", 443, R::kDeny, "host disk quotas"},
    // Raw I/O ports: direct hardware access.
    SeccompEntry{"iopl", 172, R::kDeny, "raw I/O port access"},
    SeccompEntry{"ioperm", 173, R::kDeny, "raw I/O port access"},
    // Segment descriptors: 16-bit code and LDT entries, only for emulators of old ABIs; a recurring
    // source of kernel bugs (espfix, CVE-2015-5157 family).
    SeccompEntry{"modify_ldt", 154, R::kDeny, "LDT segments: old-ABI emulation only, kernel bug history"},
    // Channels that bypass the job's network namespace. AF_VSOCK's port space is the host's (here
    // the hypervisor's): a job could connect to the host agent or hypervisor services. The kernel's
    // device events (NETLINK_KOBJECT_UEVENT) are not per network namespace for the initial user
    // namespace's devices: they show host pids of processes starting VMs and every device change.
    SeccompEntry{"socket", 41, R::kDenyVsockSockets, "AF_VSOCK reaches the host's/hypervisor's vsock ports past the netns"},
    SeccompEntry{"socket", 41, R::kDenyUeventNetlink, "uevent netlink shows the host's device events and host pids"},
    // Terminal input injection: a job that shares a terminal could type commands into it.
    SeccompEntry{"ioctl", 16, R::kDenyTerminalInjection, "TIOCSTI/TIOCLINUX push input into a terminal another process reads"},
    // io_uring: a second syscall interface that seccomp cannot see into, and a large attack surface.
    SeccompEntry{"io_uring_setup", 425, R::kDeny, "io_uring bypasses seccomp for its operations; big attack surface"},
    SeccompEntry{"io_uring_enter", 426, R::kDeny, "io_uring bypasses seccomp for its operations; big attack surface"},
    SeccompEntry{"io_uring_register", 427, R::kDeny, "io_uring bypasses seccomp for its operations; big attack surface"},
    // Execution domains change syscall semantics (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE weaken
    // the job's own hardening; exotic personalities reach rarely tested kernel code).
    SeccompEntry{"personality", 135, R::kDenyPersonalityChange, "only PER_LINUX and the query; others weaken ASLR/NX or reach odd code"},
};

constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                        CLONE_NEWUSER, CLONE_NEWPID,   CLONE_NEWNET};

// Test builds can leave out one group of entries (include/motor/test_switches.hpp).
bool weakened(const SeccompEntry& entry) {
  struct Group {
    std::string_view name;
    Control control;
  };
  static constexpr Group kGroups[] = {
      {"add_key", "seccomp-keyring"},        {"request_key", "seccomp-keyring"},  {"keyctl", "seccomp-keyring"},
      {"ptrace", "seccomp-ptrace"},          {"process_vm_readv", "seccomp-ptrace"},
      {"process_vm_writev", "seccomp-ptrace"}, {"pidfd_getfd", "seccomp-ptrace"},
      {"unshare", "seccomp-namespaces"},     {"setns", "seccomp-namespaces"},     {"clone", "seccomp-namespaces"},
      {"clone3", "seccomp-namespaces"},      {"mount", "seccomp-mount"},          {"umount2", "seccomp-mount"},
      {"pivot_root", "seccomp-mount"},       {"chroot", "seccomp-mount"},         {"move_mount", "seccomp-mount"},
      {"open_tree", "seccomp-mount"},        {"fsopen", "seccomp-mount"},         {"fsconfig", "seccomp-mount"},
      {"fsmount", "seccomp-mount"},          {"fspick", "seccomp-mount"},         {"mount_setattr", "seccomp-mount"},
      {"open_tree_attr", "seccomp-mount"},   {"ioctl", "seccomp-tiocsti"},     {"kcmp", "seccomp-ptrace"},
  };
  if (entry.rule == R::kDenyVsockSockets) return control_weakened("seccomp-vsock");
  if (entry.rule == R::kDenyUeventNetlink) return control_weakened("seccomp-uevent");
  for (const auto& [name, control] : kGroups) {
    if (name == entry.name) return control_weakened(control);
  }
  return false;
}

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

Error seccomp_error(const std::string& what, int rc) {
  return make_error("sandbox", "seccomp: " + what + ": " + std::strerror(-rc));
}

int resolve(const SeccompEntry& entry) {
  int nr = seccomp_syscall_resolve_name(entry.name);
  return nr == __NR_SCMP_ERROR ? entry.x86_64_nr : nr;
}

Status add_entry(scmp_filter_ctx ctx, const SeccompEntry& entry) {
  const int nr = resolve(entry);
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  int rc = 0;
  switch (entry.rule) {
    case R::kDeny:
      rc = seccomp_rule_add(ctx, eperm, nr, 0);
      break;
    case R::kEnosys:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
      break;
    case R::kDenyNamespaceFlags:
      // One rule per flag: EPERM if (flags & CLONE_NEWx) == CLONE_NEWx.
      for (uint64_t flag : kNamespaceFlags) {
        rc = seccomp_rule_add(ctx, eperm, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
        if (rc < 0) break;
      }
      break;
    case R::kDenyTerminalInjection:
      // The kernel reads the command as unsigned int: compare only the low 32 bits, or a caller
      // could set high bits to slip past the filter (CVE-2017-5226 in bubblewrap).
      for (uint64_t cmd : {uint64_t{TIOCSTI}, uint64_t{TIOCLINUX}}) {
        rc = seccomp_rule_add(ctx, eperm, nr, 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, cmd));
        if (rc < 0) break;
      }
      break;
    case R::kDenyPersonalityChange: {
      // Allowed: 0 (PER_LINUX) and 0xffffffff (query). libseccomp takes one comparison per
      // argument per rule, so "neither all-zero nor all-one" is written as: some bit i is set
      // while the next bit (i+1 mod 32) is clear, one masked rule per i. Any 32-bit value other
      // than 0 and 0xffffffff has such a 1->0 step somewhere round the cycle. High bits (which
      // the kernel ignores) are refused outright.
      rc = seccomp_rule_add(ctx, eperm, nr, 1, SCMP_A0(SCMP_CMP_GT, 0xffffffffULL));
      for (int i = 0; i < 32 && rc >= 0; ++i) {
        const uint64_t bit = uint64_t{1} << i;
        const uint64_t next = uint64_t{1} << ((i + 1) % 32);
        rc = seccomp_rule_add(ctx, eperm, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, bit | next, bit));
      }
      break;
    }
    case R::kDenyVsockSockets:
      // The kernel reads the domain as int: compare only the low 32 bits.
      rc = seccomp_rule_add(ctx, eperm, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_VSOCK));
      break;
    case R::kDenyUeventNetlink:
      rc = seccomp_rule_add(ctx, eperm, nr, 2, SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_NETLINK),
                            SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffULL, NETLINK_KOBJECT_UEVENT));
      break;
  }
  if (rc < 0) return seccomp_error(std::string("rule for ") + entry.name, rc);
  return {};
}

Expected<SeccompProgram> build_seccomp_policy(bool deny_sockets) {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return make_error("sandbox", "seccomp: seccomp_init failed");
  // Only the native ABI is in the filter; any other (i386 through int 0x80, x32 numbers with
  // __X32_SYSCALL_BIT) takes the bad-architecture action: kill the whole process.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0)
    return seccomp_error("bad-arch action", rc);
  // We load the program ourselves after setting no_new_privs explicitly.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0); rc < 0) return seccomp_error("nnp attr", rc);
  for (const SeccompEntry& entry : kTable) {
    if (weakened(entry)) continue;  // test build only
    if (auto st = add_entry(ctx.get(), entry); !st) return st.error();
  }
  if (deny_sockets) {
    for (const SeccompEntry& entry : {SeccompEntry{"socket", 41, R::kDeny, "file-only helper: no sockets"},
                                      SeccompEntry{"socketpair", 53, R::kDeny, "file-only helper: no sockets"}}) {
      if (auto st = add_entry(ctx.get(), entry); !st) return st.error();
    }
  }

  UniqueFd mem(memfd_create("motor-seccomp", MFD_CLOEXEC));
  if (!mem) return sys_error("memfd_create");
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc < 0) return seccomp_error("export", rc);
  const off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0 ||
      size / static_cast<off_t>(sizeof(sock_filter)) > BPF_MAXINSNS)
    return make_error("sandbox", "seccomp: exported program has a bad size");
  SeccompProgram program;
  program.instructions.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (pread(mem.get(), program.instructions.data(), static_cast<size_t>(size), 0) != size)
    return sys_error("seccomp: read exported program");
  return program;
}

}  // namespace

std::span<const SeccompEntry> seccomp_policy_table() { return kTable; }

Expected<SeccompProgram> compile_seccomp_policy(bool deny_sockets) {
  // The program depends only on these inputs, and building it is 0.1-0.2 ms of libseccomp per
  // job: each process builds each variant once. The key holds the weakened entries too (test
  // build only), which a test may change at run time.
  std::string key(1, deny_sockets ? 'd' : 'a');
  for (const SeccompEntry& entry : kTable) key += weakened(entry) ? '1' : '0';
  static std::mutex mutex;
  static std::map<std::string, SeccompProgram> built;
  std::lock_guard lock(mutex);
  if (auto it = built.find(key); it != built.end()) return it->second;
  auto program = build_seccomp_policy(deny_sockets);
  if (program) built.emplace(std::move(key), *program);  // a failure is not kept: the next call tries again
  return program;
}

int load_seccomp_program(const SeccompProgram& program) {
  if (program.instructions.empty()) return EINVAL;
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program.instructions.size());
  prog.filter = const_cast<sock_filter*>(program.instructions.data());
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return errno;
  return 0;
}

}  // namespace motor::sandbox
