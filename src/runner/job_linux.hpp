// A Linux job's execution: its process tree in the job sandbox under a cgroup of its own, started
// through the job starter; its output pipes, its exit (pidfd), the cgroup emptied after it, the
// OOM watcher. Reports to the job (ExecutionSink); the job owns the record and the deadline.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motor/unique_fd.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/cpu_claims.hpp"
#include "runner/job_execution.hpp"
#include "runner/job_output.hpp"
#include "runner/sandbox_pool.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/sandboxed_child.hpp"
#include "sandbox/starter.hpp"

namespace motor::runner {

struct LinuxLaunch {
  std::string job_id, cgroup_name, summary;
  JobCommand command;
  int64_t memory_bytes = 0;
  int64_t pids_max = 0;
  CpuClaim cpus;
  std::string caller;  // for the operator's log line
};

class LinuxExecution : public Execution {
 public:
  LinuxExecution(uv_loop_t* loop, LinuxLaunch launch, ExecutionSink& sink);
  ~LinuxExecution() override;

  // Asks the starter to make the cgroup and spawn `box` in it (a starter that cannot make
  // cgroups: the cgroup is made here, on the loop, first), or, given a sandbox built ahead for it
  // (sandbox_pool.hpp), makes the cgroup, moves that sandbox into it and asks the starter for its
  // late binds. An error returned here or reported later (ExecutionSink::execution_start_failed)
  // leaves nothing.
  Status start(sandbox::CgroupDriver& cgroups, sandbox::Starter& starter, const sandbox::SandboxConfig& box,
               std::unique_ptr<PooledSandbox> pooled = nullptr);

  void kill(std::optional<protocol::KillReason> why) override;
  void shutdown() override;
  void release(std::function<void()> released) override;
  void command_may_run() override;

 private:
  // With its cgroup made: the job's pipes, and the starter asked to spawn it.
  Status spawn(sandbox::Starter& starter, const sandbox::SandboxConfig& box);
  // With its cgroup made: the sandbox built ahead moved into it, its late binds asked for.
  Status take_over(sandbox::Starter& starter, std::unique_ptr<PooledSandbox> pooled);
  // Once the sandbox built ahead has its pid: the starter asked to move it into the job's cgroup
  // and mount its late binds.
  void bind_pooled(sandbox::Starter& starter);
  void on_late_binds(Status mounted);
  // The sandboxed child's events (sandbox/sandboxed_child.hpp).
  void on_spawned(pid_t pid);                     // watch the output pipes
  void on_start_failed(const std::string& why);   // the job ends as refused
  // A cgroup the starter was asked to make and never handed over, looked up by name into cgroup_.
  void take_cgroup_left_by_starter();
  void on_execd();                                // the `started` record
  void on_exit(sandbox::SandboxedExit exit);
  void watch_oom();
  // `woken`: by the watcher's fd (else a re-check after a wake-up without a kill yet).
  void on_oom_event(bool woken);
  void kill_cgroup();
  void kill_failed(const std::string& why);
  void check_empty();
  void maybe_end();
  // Arms end_later_ (false if it cannot be: the end is then not put off).
  bool end_later();
  ExecutionEnd end_state();
  void log(const std::string& line) const;

  uv_loop_t* loop_;
  LinuxLaunch launch_;
  ExecutionSink& sink_;
  // Shared with a kill on libuv's pool (kill_cgroup), so a job that ends meanwhile removes it
  // only after the write (its last reference drops on the loop).
  std::shared_ptr<sandbox::JobCgroup> cgroup_;
  // Set while the starter makes the cgroup (SpawnSpec::make_cgroup): it is opened by name when
  // the starter answers, or looked for and removed if the start fails.
  sandbox::CgroupDriver* cgroups_ = nullptr;
  sandbox::CgroupRequest cgroup_request_;
  bool starter_makes_cgroup_ = false;
  std::unique_ptr<sandbox::SandboxedChild> child_;  // the job's PID 1 (motor-init)
  UniqueFd out_read_, err_read_;  // the job's output pipes, until the starter has answered
  // The write end of motor-init's gate (its fd 0): "g" when the job is on record, then closed.
  UniqueFd gate_;
  // A sandbox built ahead: the gate until its late binds are in, and the command message it
  // gets instead of "g"; its exit, if it came before the late binds' answer (handled after it).
  UniqueFd pooled_gate_;
  std::string command_message_;
  std::vector<sandbox::LateBind> late_binds_;
  bool late_binds_pending_ = false;
  std::optional<sandbox::SandboxedExit> exit_before_binds_;
  bool may_run_ = false;
  pid_t pid_ = -1;
  bool started_confirmed_ = false;
  std::string setup_error_;  // the child failed before exec
  bool exited_ = false, ended_ = false;
  int wait_status_ = 0;
  std::optional<std::vector<int>> pipestatus_;  // what the shell reported through motor-init
  bool cgroup_empty_ = false;
  std::optional<protocol::KillReason> killed_;
  bool kill_issued_ = false;
  bool kill_in_flight_ = false;       // a cgroup kill on the pool has not answered yet
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // the pool's answer checks it
  int leftover_polls_ = 0;    // test build ("cgroup-kill"): polls of a cgroup the runner does not kill
  int unreadable_polls_ = 0;  // consecutive polls that could not read the cgroup's state
  reactor::UvHandle<uv_timer_t> empty_poll_;   // cgroup emptiness after a kill
  reactor::UvHandle<uv_idle_t> end_later_;     // the end, past the loop iteration's budget
  std::optional<sandbox::OomWatch> oom_watch_;  // live OOM watcher; the exit-time read confirms
  reactor::UvHandle<uv_poll_t> oom_poll_;
  reactor::UvHandle<uv_timer_t> oom_recheck_;  // v1 wakes before the killer has chosen
  int oom_rechecks_left_ = 0;
  int64_t oom_kills_seen_ = 0;
  JobOutput output_;  // read from the spawn on (a full disk pauses it), not by the child's watch
};

}  // namespace motor::runner
