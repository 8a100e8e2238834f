// The job's /dev: a tmpfs with null, zero, full, random, urandom and tty, a private /dev/shm, a
// fresh devpts instance (its own ptys, not the host's), the std fd links, and nothing else.
// Read-only once built: the job cannot add to it (and cannot mknod anywhere: no CAP_MKNOD, and
// every other mount is nodev).
#pragma once

#include <cstdint>
#include <vector>

#include "sandbox/mounts.hpp"

namespace motor::sandbox {

// Ptys one job's devpts instance may hold at once (devpts max=): a build needs a few, a job that
// opens more gets ENOSPC.
inline constexpr int kJobPtyMax = 64;

// How the nodes get there: mknod (needs CAP_MKNOD in the initial user namespace), or, for a
// sandbox in its own user namespace (user_namespace.hpp), read-only binds of the host's nodes.
enum class DeviceNodes { kMade, kBoundFromHost };

void plan_devices(std::vector<MountOp>& ops, uint64_t shm_size_bytes, DeviceNodes nodes = DeviceNodes::kMade);

}  // namespace motor::sandbox
