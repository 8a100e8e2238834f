// A private writable layer over a shared tree (the compile caches, docs/compile-cache.md): an
// overlayfs whose lower layer is the shared tree's read-only (optionally idmapped) bind and whose
// upper and work directories live on a fresh tmpfs that only this mount holds. A job writes and
// replaces files there as it likes; nothing reaches the shared tree, and the layer goes with the
// job's mount namespace (nothing on disk to clean up).
#pragma once

#include <cstdint>
#include <string>

#include "sandbox/mounts.hpp"

namespace motor::sandbox {

// Parent: the op for an overlay at `target` over the host directory `lower`; the upper tmpfs is
// capped at `upper_bytes`.
MountOp overlay_op(const std::string& lower, const std::string& target, uint64_t upper_bytes);

// Child, before the root changes: `lower` is the captured read-only clone of op.source (closed
// here). Sets `mnt` to the detached overlay mount or returns an errno.
int make_overlay(const MountOp& op, int lower, int& mnt);

}  // namespace motor::sandbox
