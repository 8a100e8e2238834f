// The seccomp policy itself, apart from the rest of the sandbox:
//  - every entry of the reviewed table has a harmless try in the probe, and
//  - each try, run as root with only the filter loaded, gets the filter's answer, while the same
//    try without the filter gets a different one: the entry (not a missing capability) is what
//    refuses the call. This is the "test fails when the control is removed" check, per entry.
//  - the exported program, run through a small classic-BPF interpreter, kills the i386 and x32
//    ABIs (this kernel cannot take int 0x80 from a 64-bit process at all) and allows only the two
//    personality values over a wide sample.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sched.h>
#include <cstddef>
#include <cstdlib>
#include <random>
#include <set>
#include <span>
#include <string>

#include "motor/test_switches.hpp"
#include "sandbox/seccomp_policy.hpp"

#include "integration/sandbox_probe.hpp"

namespace {

using motor::sandbox::SeccompProgram;
using motor_sandbox_test::Expect;

const SeccompProgram& program() {
  static const SeccompProgram p = [] {
    auto compiled = motor::sandbox::compile_seccomp_policy();
    if (!compiled) std::abort();
    return *compiled;
  }();
  return p;
}

void load_filter() {
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (motor::sandbox::load_seccomp_program(program()) != 0) _exit(3);
}

std::string base_name(const std::string& try_name) { return try_name.substr(0, try_name.find('(')); }

TEST(SandboxSeccomp, EveryTableEntryHasATry) {
  std::set<std::string> tried;
  for (const auto& t : motor_sandbox_test::syscall_tries()) tried.insert(base_name(t.name));
  for (const auto& e : motor::sandbox::seccomp_policy_table()) {
    EXPECT_TRUE(tried.count(e.name)) << "no harmless try for " << e.name;
    EXPECT_NE(std::string(e.reason), "") << e.name;
  }
}

TEST(SandboxSeccomp, EachEntryIsWhatRefusesTheCall) {
  if (geteuid() != 0) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true") FAIL() << "needs root under CI";
    GTEST_SKIP() << "needs root: the unfiltered baseline must not fail for lack of privilege";
  }
  for (const auto& t : motor_sandbox_test::syscall_tries()) {
    const long without = motor_sandbox_test::run_try_in_child(t, nullptr);
    const long with = motor_sandbox_test::run_try_in_child(t, load_filter);
    const std::string w = motor_sandbox_test::describe(with), wo = motor_sandbox_test::describe(without);
    switch (t.expect) {
      case Expect::kEperm:
        EXPECT_EQ(w, "EPERM") << t.name;
        EXPECT_NE(wo, "EPERM") << t.name << ": even root gets EPERM without the filter, so the try proves nothing";
        break;
      case Expect::kEnosys:
        EXPECT_EQ(w, "ENOSYS") << t.name;
        EXPECT_NE(wo, "ENOSYS") << t.name;
        break;
      case Expect::kAllowed:
        // Same outcome class (a return value, or the same errno): fork returns different pids.
        EXPECT_EQ(w.substr(0, 4) == "ret " ? "ret" : w, wo.substr(0, 4) == "ret " ? "ret" : wo)
            << t.name << ": the filter must not change an allowed call";
        break;
    }
  }
}

// A classic-BPF interpreter for the instructions libseccomp emits, over one seccomp_data.
uint32_t run_bpf(std::span<const sock_filter> prog, const seccomp_data& data) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {};
  const auto* bytes = reinterpret_cast<const unsigned char*>(&data);
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const sock_filter& f = prog[pc];
    switch (f.code) {
      case BPF_LD | BPF_W | BPF_ABS: {
        if (f.k + 4 > sizeof data) return 0xdead;
        uint32_t v;
        std::memcpy(&v, bytes + f.k, 4);
        a = v;
        break;
      }
      case BPF_LD | BPF_IMM: a = f.k; break;
      case BPF_LDX | BPF_IMM: x = f.k; break;
      case BPF_LD | BPF_MEM: a = mem[f.k % BPF_MEMWORDS]; break;
      case BPF_LDX | BPF_MEM: x = mem[f.k % BPF_MEMWORDS]; break;
      case BPF_ST: mem[f.k % BPF_MEMWORDS] = a; break;
      case BPF_STX: mem[f.k % BPF_MEMWORDS] = x; break;
      case BPF_ALU | BPF_AND | BPF_K: a &= f.k; break;
      case BPF_ALU | BPF_OR | BPF_K: a |= f.k; break;
      case BPF_MISC | BPF_TAX: x = a; break;
      case BPF_MISC | BPF_TXA: a = x; break;
      case BPF_JMP | BPF_JA: pc += f.k; break;
      case BPF_JMP | BPF_JEQ | BPF_K: pc += (a == f.k) ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGT | BPF_K: pc += (a > f.k) ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGE | BPF_K: pc += (a >= f.k) ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JSET | BPF_K: pc += (a & f.k) ? f.jt : f.jf; break;
      case BPF_RET | BPF_K: return f.k;
      case BPF_RET | BPF_A: return a;
      default: return 0xbad0000 | f.code;  // an instruction this interpreter does not know
    }
  }
  return 0xdead;
}

seccomp_data call(uint32_t arch, int nr, uint64_t a0 = 0, uint64_t a1 = 0) {
  seccomp_data d{};
  d.arch = arch;
  d.nr = nr;
  d.args[0] = a0;
  d.args[1] = a1;
  return d;
}

constexpr uint32_t kEperm = SECCOMP_RET_ERRNO | EPERM;

TEST(SandboxSeccomp, ForeignAbisAreKilled) {
  const auto& p = program().instructions;
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_getpid)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_I386, 20 /* i386 getpid */)), SECCOMP_RET_KILL_PROCESS);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_I386, 26 /* i386 ptrace */)), SECCOMP_RET_KILL_PROCESS);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, 0x40000000 | SYS_getpid)), SECCOMP_RET_KILL_PROCESS);  // x32
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_ptrace)), kEperm);
}

TEST(SandboxSeccomp, PersonalityOnlyLinuxAndQuery) {
  const auto& p = program().instructions;
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, 0)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, 0xffffffffULL)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, ~0ULL)), kEperm);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, 1ULL << 32)), kEperm);
  for (int bit = 0; bit < 32; ++bit) {
    EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, 1ULL << bit)), kEperm) << bit;
    EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, 0xffffffffULL ^ (1ULL << bit))), kEperm) << bit;
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t v = rng() & 0xffffffffULL;
    if (v == 0 || v == 0xffffffffULL) continue;
    ASSERT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_personality, v)), kEperm) << std::hex << v;
  }
}

TEST(SandboxSeccomp, TerminalInjectionIgnoresHighBits) {
  const auto& p = program().instructions;
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_ioctl, 0, TIOCSTI)), kEperm);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_ioctl, 0, TIOCSTI | (0xabcdULL << 32))), kEperm);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_ioctl, 0, TIOCLINUX)), kEperm);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_ioctl, 0, FIONREAD)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_clone, CLONE_NEWUSER | SIGCHLD)), kEperm);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_clone, 0x003d0f00 /* pthread_create */)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, call(AUDIT_ARCH_X86_64, SYS_clone3)), SECCOMP_RET_ERRNO | ENOSYS);
}

}  // namespace

namespace {

seccomp_data socket_call(uint64_t domain, uint64_t type, uint64_t protocol) {
  seccomp_data d = call(AUDIT_ARCH_X86_64, SYS_socket, domain, type);
  d.args[2] = protocol;
  return d;
}

// Issue 15 items 4 and 8: AF_VSOCK and the kernel's uevent netlink are refused whatever the high
// bits (the kernel reads int), every other family and netlink protocol passes; the file-only
// helpers' filter (deny_sockets) still refuses every socket on top of those rules.
TEST(SandboxSeccomp, VsockAndUeventNetlinkSocketsAreRefused) {
  const auto& p = program().instructions;
  EXPECT_EQ(run_bpf(p, socket_call(AF_VSOCK, SOCK_STREAM, 0)), kEperm);
  EXPECT_EQ(run_bpf(p, socket_call(AF_VSOCK | (1ULL << 32), SOCK_DGRAM, 0)), kEperm);
  EXPECT_EQ(run_bpf(p, socket_call(AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)), kEperm);
  EXPECT_EQ(run_bpf(p, socket_call(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT | (7ULL << 32))), kEperm);
  EXPECT_EQ(run_bpf(p, socket_call(AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, socket_call(AF_INET, SOCK_STREAM, NETLINK_KOBJECT_UEVENT)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(p, socket_call(AF_UNIX, SOCK_STREAM, 0)), SECCOMP_RET_ALLOW);
  auto no_sockets = motor::sandbox::compile_seccomp_policy(true);
  ASSERT_TRUE(no_sockets) << no_sockets.error().message;
  EXPECT_EQ(run_bpf(no_sockets->instructions, socket_call(AF_UNIX, SOCK_STREAM, 0)), kEperm);
  EXPECT_EQ(run_bpf(no_sockets->instructions, socket_call(AF_VSOCK, SOCK_STREAM, 0)), kEperm);
}

// Each process builds each variant of the program once (compile_seccomp_policy keeps it): a
// later call gives the same program, the other variant its own, and a weakened entry (test build
// only) a program of its own, never the one kept from before.
TEST(SandboxSeccomp, AKeptProgramIsTheOneItsInputsWouldBuild) {
  auto again = motor::sandbox::compile_seccomp_policy();
  ASSERT_TRUE(again);
  EXPECT_EQ(run_bpf(again->instructions, call(AUDIT_ARCH_X86_64, SYS_ptrace)), kEperm);
  EXPECT_EQ(again->instructions.size(), program().instructions.size());
  auto no_sockets = motor::sandbox::compile_seccomp_policy(true);
  ASSERT_TRUE(no_sockets);
  EXPECT_EQ(run_bpf(no_sockets->instructions, socket_call(AF_UNIX, SOCK_STREAM, 0)), kEperm);
  EXPECT_EQ(run_bpf(again->instructions, socket_call(AF_UNIX, SOCK_STREAM, 0)), SECCOMP_RET_ALLOW);
  const auto saved = motor::test_switches().weakened;
  motor::test_switches().weakened = {*motor::Control::parse("seccomp-ptrace")};
  auto weakened = motor::sandbox::compile_seccomp_policy();
  motor::test_switches().weakened = saved;
  ASSERT_TRUE(weakened);
  EXPECT_EQ(run_bpf(weakened->instructions, call(AUDIT_ARCH_X86_64, SYS_ptrace)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_bpf(motor::sandbox::compile_seccomp_policy()->instructions, call(AUDIT_ARCH_X86_64, SYS_ptrace)), kEperm);
}

}  // namespace
