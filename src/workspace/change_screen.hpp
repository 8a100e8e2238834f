// The runner's side of the change screen (issue 24, docs/change-screen.md): an untrusted
// workspace's change (its synthetic commit against the caller's base commit) is read with git in
// the mirror, as the mirror account, bounded in time, memory and output, and judged by
// src/screen. Async: every git call is a child process watched on the loop.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "screen/screen.hpp"

namespace motor::workspace {

struct MirrorScreen {
  std::string git;                // absolute path
  std::vector<std::string> env;   // the runner's git environment (no hooks, no system config)
  uid_t uid = 0;                  // the mirror account: never root over a caller's objects
  gid_t gid = 0;
  std::string mirror;             // the bare mirror holding both commits
  std::string base, change;       // commit ids
};

// Bounds of each git call of the screen.
inline constexpr uint64_t kScreenTimeoutMs = 60000;
inline constexpr size_t kScreenMaxOutputBytes = size_t{16} << 20;
inline constexpr long kScreenAddressSpaceKiB = 1L << 20;  // ulimit -v: 1 GiB

// Runs the screen; `done` gets the verdict, or an error (git failed, timed out, printed more
// than its bound or something that is not git's format): an error means DO NOT EXECUTE.
void screen_in_mirror(uv_loop_t* loop, MirrorScreen spec, std::function<void(Expected<screen::Result>)> done);

}  // namespace motor::workspace
