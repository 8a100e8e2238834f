// One child process started with uv_spawn and watched on the loop: its stdout collected up to a
// bound, the tail of its stderr kept for error messages, killed at a deadline. Git and the
// workspace sandbox run this way, so no git call ever blocks the runner's loop.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace motor::workspace {

struct ChildSpec {
  std::string file;                // absolute path of the executable
  std::vector<std::string> argv;   // argv[0] included
  std::vector<std::string> env;    // the whole environment ("NAME=value")
  std::string cwd = "/";
  std::optional<uid_t> uid;        // run as this account (no supplementary groups)
  std::optional<gid_t> gid;
  uint64_t timeout_ms = 600000;
  size_t max_stdout_bytes = size_t{64} << 20;
  int stdin_fd = -1;               // >= 0: the child's stdin (shared; the caller closes its copy)
};

struct ChildResult {
  int exit_code = -1;       // -1 when it did not exit normally
  int term_signal = 0;
  bool timed_out = false;
  bool stdout_truncated = false;
  std::string out;
  std::string err_tail;     // the last 4 KiB of stderr
  std::string spawn_error;  // uv_spawn failed
  bool ok() const { return spawn_error.empty() && exit_code == 0 && !timed_out; }
  // One line for logs and refusal details.
  std::string describe() const;
};

// Starts the child; `done` runs on the loop once it has exited and its pipes are drained.
void run_child(uv_loop_t* loop, ChildSpec spec, std::function<void(ChildResult)> done);

}  // namespace motor::workspace
