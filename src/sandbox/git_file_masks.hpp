// SandboxConfig::mask_special_git_files: in the child, as root in its own mount namespace after
// the pivot, every .gitignore, .gitattributes, .gitmodules or .mailmap under `root` that is a
// FIFO, socket or device is covered with the sandbox's empty read-only file (proc.hpp's
// kMaskedEmptyFile). git opens those by name, and a FIFO would block it for good.
//
// It walks a tree (nftw allocates): for an in-process spawn, whose child is a copy of a
// single-threaded caller (motor-workspace-sandbox), never for the runner's loop.
#pragma once

namespace motor::sandbox {

// 0, or an errno after naming the step in `stage`.
int mask_special_git_files(const char* root, const char*& stage);

}  // namespace motor::sandbox
