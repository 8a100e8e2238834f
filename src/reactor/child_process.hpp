// One child process watched on the loop (DESIGN.md: whatever could block the loop runs in a
// child): its stdout collected up to a bound, the tail of its stderr kept for messages, killed at
// a deadline, its end reported once, on the loop. The child is either started here with uv_spawn
// (git, motor-vm-helper) or started elsewhere with clone3 (the job sandbox) and adopted by its
// pidfd. The libuv handles live in a watch that outlives its owner until the child is reaped, so
// dropping a ChildProcess kills the child and never leaves a zombie or a callback to a dead owner.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::reactor {

struct ChildSpec {
  std::string file;               // absolute path of the executable
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the whole environment ("NAME=value"); empty: none at all
  std::string cwd = "/";
  std::optional<uid_t> uid;  // run as this account (no supplementary groups)
  std::optional<gid_t> gid;
  uint64_t timeout_ms = 600000;  // 0: no deadline
  size_t max_stdout_bytes = size_t{64} << 20;
  int stdin_fd = -1;  // >= 0: the child's stdin (shared; the caller closes its copy); else none
};

struct ChildExit {
  int exit_code = -1;  // -1 when it did not exit normally
  int term_signal = 0;
  bool timed_out = false;         // killed at the deadline
  bool stdout_truncated = false;  // it wrote more than max_stdout_bytes; `out` holds the first ones
  size_t max_stdout_bytes = 0;
  std::string out;
  std::string err_tail;  // the last 4 KiB of stderr

  // Exited 0, in time, and all of its output is in `out`.
  bool ok() const { return exit_code == 0 && !timed_out && !stdout_truncated; }
  // The status as a shell reports it: the exit code, or 128 + the signal.
  int shell_status() const { return term_signal ? 128 + term_signal : exit_code; }
  // One line for logs and refusals: "exit 3: <stderr tail>", "killed by signal 9", "timed out",
  // with "; output over N bytes, cut" when the bound was hit.
  std::string describe() const;
};

class ChildProcess {
 public:
  using Done = std::function<void(ChildExit)>;

  // Starts `spec`; `done` runs on the loop once the child exited and its pipes are drained, unless
  // the ChildProcess is dropped first. Error: it could not be started (e.g. a missing binary).
  static Expected<std::unique_ptr<ChildProcess>> spawn(uv_loop_t* loop, const ChildSpec& spec, Done done);

  // Watches a child started elsewhere: `pidfd` is polled and reaped (waitid P_PIDFD), `stdout_read`
  // and `stderr_read` (either may be invalid) are read like a spawned child's pipes.
  static Expected<std::unique_ptr<ChildProcess>> adopt(uv_loop_t* loop, pid_t pid, UniqueFd pidfd, UniqueFd stdout_read,
                                                       UniqueFd stderr_read, uint64_t timeout_ms, size_t max_stdout_bytes,
                                                       Done done);

  // Fire and forget: `done` always runs (an Error when the child could not be started, then
  // before this returns). Nothing owns the child; it ends by itself or at its deadline.
  static void run_detached(uv_loop_t* loop, const ChildSpec& spec, std::function<void(Expected<ChildExit>)> done);

  ~ChildProcess();  // a child still running is killed (SIGKILL) and reaped later on the loop
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // From now on stdout goes to `chunk` as it arrives (still at most max_stdout_bytes in all, then
  // stdout_truncated) instead of into ChildExit::out. Set right after spawn/adopt. The callback
  // must not destroy this ChildProcess.
  void stream_stdout(std::function<void(std::string_view)> chunk);

  // An adopted child: `peek` runs once its pidfd says it exited, just before it is reaped (while
  // /proc/PID still shows it: motor-init names the signal that killed its command there).
  void before_reap(std::function<void(pid_t)> peek);
  // SIGKILL now (the end is reported as usual).
  void kill();

  pid_t pid() const { return pid_; }
  bool finished() const { return watch_ == nullptr; }

  struct Watch;  // the handles and the state; see child_process.cpp

 private:
  ChildProcess() = default;
  Watch* watch_ = nullptr;  // cleared by the watch when it finishes
  pid_t pid_ = -1;
};

}  // namespace motor::reactor
