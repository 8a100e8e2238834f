// The job's /proc: a fresh procfs instance bound to the job's PID namespace, so it lists only
// the job's processes. No /sys at all (nothing in cc/make/cargo/python3/git needs it; CPU count
// comes from sched_getaffinity).
#pragma once

#include <vector>

#include "sandbox/mounts.hpp"

namespace motor::sandbox {

// Host-wide files of procfs the job sees empty (masked), and the empty file that covers them.
inline constexpr const char* kMaskedProcFiles[] = {"/proc/cmdline", "/proc/config.gz",
                                                   "/proc/sys/kernel/random/boot_id", "/proc/key-users"};
inline constexpr const char* kMaskedEmptyFile = "/.motor/masked";

void plan_proc(std::vector<MountOp>& ops);

}  // namespace motor::sandbox
