// The job's /proc: a fresh procfs instance bound to the job's PID namespace, so it lists only
// the job's processes. No /sys at all (nothing in cc/make/cargo/python3/git needs it; CPU count
// comes from sched_getaffinity).
#pragma once

#include <vector>

#include "sandbox/mounts.hpp"

namespace motor::sandbox {

void plan_proc(std::vector<MountOp>& ops);

}  // namespace motor::sandbox
