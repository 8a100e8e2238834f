// The one way to run a command in the job sandbox on the loop (issue 16): "run this SpawnSpec in
// this SandboxConfig, tell me when it exec'd and when it exited". The job (runner/job_linux), a
// VM job's preparation and disk tools (vm/confined_child) and motor-workspace-sandbox all start
// their children here. The Starter behind it is the runner's job starter where one runs (a
// helper process: cheap clones), else the in-process one (starter.hpp).
//
//   parent:  Starter::spawn (plan, clone3 into the caller's cgroup)  ->  SpawnedProcess
//   here:    the setup-status pipe on the loop  ->  Events::execd (EOF before any kill())
//            the pidfd, through reactor::ChildProcess (reaped; optional output and deadline)
//            ->  Events::exited, once, after execd if it ran
//
// The caller owns the cgroup and the pipes in the spec (their read ends go to `Watch` or stay
// the caller's); the child is killed when this object goes, and reaped on the loop even then.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/child_process.hpp"
#include "reactor/uv_handle.hpp"
#include "sandbox/starter.hpp"

namespace motor::sandbox {

struct SandboxedExit {
  reactor::ChildExit child;  // exit code or signal, the collected output, timed_out
  // As waitpid reports it; a command that died of signal N inside the sandbox (motor-init,
  // PID 1, exits 128+N and names N) is reported as that signal.
  int wait_status = 0;
  // What motor-init reported as the statuses of a shell command's last pipeline (pipestatus.hpp),
  // read before the reap; none when it reported nothing well-formed.
  std::optional<std::vector<int>> init_pipestatus;
  // Written by the child before exec: empty when it exec'd; "exec: PATH: why" when only the
  // exec failed; else the sandbox step that failed ("stage: why").
  std::string setup_failure;
  bool execd = false;                // Events::execd ran
  bool killed_before_exec = false;   // kill() came before the exec was seen (and no setup failure)
};

class SandboxedChild {
 public:
  struct Events {
    // No child exists (the plan failed, or the starter): the reason. May destroy this.
    std::function<void(const Error&)> start_failed;
    // The starter answered with a child (its pid), before it exec'd. Optional; may destroy this.
    std::function<void(pid_t)> spawned;
    // The command runs (the setup-status pipe closed empty, and kill() was not called first). Optional.
    std::function<void()> execd;
    // Once, after its pipes given to Watch are drained. May destroy this.
    std::function<void(SandboxedExit)> exited;
  };
  // What reactor::ChildProcess does for the child besides reaping it.
  struct Watch {
    UniqueFd stdout_read, stderr_read;  // read and collected (or streamed); invalid: not read here
    uint64_t timeout_ms = 0;            // 0: none (a kill of motor-init ends the whole sandbox)
    size_t max_stdout_bytes = size_t{64} << 20;
    std::function<void(std::string_view)> stream_stdout;  // set: stdout goes here as it arrives
  };

  // Asks `starter` for the child; the events follow on `loop` (start_failed may run before this
  // returns: the object is returned all the same, and then does nothing more).
  static std::unique_ptr<SandboxedChild> start(uv_loop_t* loop, Starter& starter, const SandboxConfig& box,
                                               const SpawnSpec& spec, Watch watch, Events events);
  ~SandboxedChild();
  SandboxedChild(const SandboxedChild&) = delete;
  SandboxedChild& operator=(const SandboxedChild&) = delete;

  // SIGKILL to the child (motor-init: the whole sandbox goes with it); before the starter has
  // answered, as soon as it does. The end is reported as usual.
  void kill();
  // Output arrived on the caller's own pipes: the child must have exec'd; reads the setup status now.
  void check_setup();
  pid_t pid() const { return pid_; }
  // A sandbox built ahead's mount namespace (SpawnedProcess::mount_ns) until it exits; else -1.
  int mount_ns() const { return mount_ns_.get(); }
  // From now on the events go to `events` (a sandbox built ahead, handed to its job).
  void rebind(Events events);
  // The command ran as far as the sandbox knows: exec'd, or exited after it.
  bool execd() const { return execd_; }
  // When the starter read the request, planned and cloned (for the start steps; 0: unknown).
  const SpawnTimes& spawn_times() const { return spawn_times_; }
  bool running() const { return child_ && !child_->finished(); }

 private:
  SandboxedChild(uv_loop_t* loop, Watch watch, Events events);
  void on_spawned(Expected<SpawnedProcess> spawned);
  void read_setup_status();  // once the pipe is readable: exec'd, or a failure text
  void on_exit(reactor::ChildExit exit);

  uv_loop_t* loop_;
  Watch watch_;
  Events events_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // the starter's answer checks it
  pid_t pid_ = -1;
  SpawnTimes spawn_times_;
  UniqueFd setup_status_;
  UniqueFd mount_ns_;
  reactor::UvHandle<uv_poll_t> setup_poll_;
  std::unique_ptr<reactor::ChildProcess> child_;
  bool setup_known_ = false, execd_ = false, kill_wanted_ = false;
  std::string setup_failure_;
  int init_signal_ = 0;
  std::optional<std::vector<int>> init_pipestatus_;
};

}  // namespace motor::sandbox
