// A Linux job as a transient systemd service (job_backend = systemd; docs/job-isolation.md "The
// systemd backend"). The unit `motor-job-<id>.service` in motor-jobs.slice is started with
// StartTransientUnit on the loop's bus connection (systemd_units.hpp), with the job's claim as
// MemoryMax, MemorySwapMax, TasksMax, AllowedCPUs (and CPUAffinity), User=motor-job,
// NoNewPrivileges and an empty CapabilityBoundingSet; its ExecStart is motor-unit-entry
// (src/sandbox/unit_entry/main.cpp), which builds the job sandbox inside the unit, in a user
// namespace of the job's own (sandbox/user_namespace.hpp), and execs motor-init.
//
// The unit's stdin is a socket to the runner (the sandbox request goes in, the setup status and
// the wait status come out); its stdout and stderr are the runner's own output pipes, passed over
// the bus (StandardOutputFileDescriptor), so the job log, attach and replay are as for a direct
// job. Cancel and timeout: KillUnit (SIGKILL to every process of the unit) and StopUnit. The job
// ends when motor-init's status arrived (or the entry died), the output pipes are at EOF and the
// unit's cgroup is empty: its cgroup.events says "populated 0" (the entry names its cgroup2
// directory; the runner watches the file), or, where that was not named or not readable, the
// unit is gone: UnitRemoved (Manager signal, arg0 the unit), or GetUnit answering NoSuchUnit; a
// gone transient unit is one whose processes are all gone. The events file comes first, by the
// few milliseconds systemd takes to notice, unload the unit and say so on the bus.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motor/unique_fd.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/cpu_claims.hpp"
#include "runner/job_execution.hpp"
#include "runner/job_output.hpp"
#include "runner/systemd_units.hpp"
#include "runner/unit_watch.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup_usage.hpp"
#include "sandbox/sandbox_config.hpp"

namespace motor::runner {

struct UnitLaunch {
  std::string job_id, summary, caller;
  JobCommand command;  // motor-init inside the sandbox
  int64_t memory_bytes = 0;
  int64_t pids_max = 0;
  CpuClaim cpus;
};

class SystemdExecution : public Execution {
 public:
  SystemdExecution(uv_loop_t* loop, SystemdUnits& units, UnitLaunch launch, ExecutionSink& sink);
  ~SystemdExecution() override;

  // Sends StartTransientUnit (the answer comes on the loop). On error nothing was asked of systemd.
  Status start(sandbox::SandboxConfig box);

  void kill(std::optional<protocol::KillReason> why) override;
  void shutdown() override;
  // Nothing is left: the job ends only once its unit is gone.
  void release(std::function<void()> released) override { released(); }
  // The entry's "go" (it clones the job on it) waits for both its cgroup's limits and this.
  void command_may_run() override;

 private:
  Status watch_unit();
  Status send_start(int control_fd, int out_fd, int err_fd);
  Status read_control();
  void on_control(ssize_t nread, const char* data);
  void on_control_line(const std::string& line);
  void on_steps(const std::string& stamps);
  void on_cgroup(const std::string& dir);
  void send_go();
  void on_events(const std::string& dir);
  void on_entry_pid(const std::string& pid);
  void check_cgroup_empty();
  Status check_own_cgroup(const std::string& dir) const;
  Status limit_socket_buffers(const std::string& dir) const;
  void on_setup(const std::string& error);
  void on_exited(int wait_status, int64_t oom_kills);
  void on_start_answer(sd_bus_message* reply);
  void on_start_job_ended(const std::string& result);
  void unit_gone();
  void fail_start(const std::string& detail);
  void maybe_end();
  ExecutionEnd end_state() const;

  uv_loop_t* loop_;
  SystemdUnits& units_;
  UnitLaunch launch_;
  ExecutionSink& sink_;
  std::string unit_;
  UnitWatch watch_;  // its start job's end, its removal
  JobOutput output_;
  reactor::UvHandle<uv_pipe_t> control_;
  std::string control_buf_;
  char control_read_[1024];
  reactor::UvHandle<uv_fs_event_t> cgroup_events_;  // the unit's cgroup.events changed
  std::string events_dir_;                         // the unit's cgroup2 directory, as the entry named it
  // The entry's exit (a pidfd): the unit's cgroup is looked at again then. The kernel notifies
  // cgroup.events at most once per 10 ms, so its watch alone may end a short job that much later.
  UniqueFd entry_pidfd_;
  reactor::UvHandle<uv_poll_t> entry_exit_;
  sd_bus_slot* start_slot_ = nullptr;
  bool setup_seen_ = false, start_failed_ = false;
  bool limits_set_ = false, may_run_ = false, go_sent_ = false;
  std::string setup_error_;
  bool exited_ = false, gone_ = false, cgroup_empty_ = false, ended_ = false;
  int wait_status_ = 0;
  int64_t oom_kills_ = 0;
  sandbox::CgroupUsage usage_;
  std::optional<protocol::KillReason> killed_;
  bool kill_issued_ = false;
};

}  // namespace motor::runner
