// The sandbox probe's harmless syscall tries (sandbox_probe.cpp), one per seccomp table entry,
// shared by the sandbox-level and the runner-level seccomp tests.
#pragma once

#include <span>
#include <string>

namespace motor_sandbox_test {

enum class Expect { kEperm, kEnosys, kAllowed };

struct SyscallTry {
  const char* name;  // "clone(CLONE_NEWUSER)": the seccomp table entry is the part before '('
  Expect expect;
  long (*call)();
};

std::span<const SyscallTry> syscall_tries();
// Runs one try in a throwaway child (after `before`, e.g. loading the filter); -errno or the result.
long run_try_in_child(const SyscallTry& t, void (*before)());
std::string describe(long r);

}  // namespace motor_sandbox_test
