// One job: its record (JobRecord: log, followers, terminal), its execution (Execution: the Linux
// sandbox or a VM), its deadline, its workspace report and its place in the runner's accounting.
// Everything here runs on the runner's loop; the runner is reached only through JobHost.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/messages.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/cpu_claims.hpp"
#include "runner/job_execution.hpp"
#include "runner/job_log.hpp"
#include "runner/job_record.hpp"
#include "sandbox/job_starter.hpp"
#include "runner/job_state.hpp"
#include "runner/session_id.hpp"
#include "runner/start_steps.hpp"
#include "base/sha256.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "vm/vm_job.hpp"

namespace motor::runner {

struct PooledSandbox;

class Job;
class Session;
class SystemdUnits;

// What a job needs of the runner besides its record's needs (RecordHost).
class JobHost : public RecordHost {
 public:
  // The job's state changed and must be saved (it is running: before its `accepted` goes out).
  virtual void job_changed() = 0;
  // The command runs; it waited this long since it was queued.
  virtual void job_started(double start_latency_s) = 0;
  // Its processes are gone: its workspace is scanned (Job::set_workspace_report follows).
  virtual void scan_workspace(Job& job) = 0;
  // The job starter could not start it: the runner ends it as refused.
  virtual void job_start_failed(Job& job, const std::string& detail) = 0;
  // It ended (terminal record set): its claims are freed.
  virtual void job_finished(Job& job) = 0;
};

struct JobLaunch {
  JobCommand command;  // a Linux job's (a VM job's command goes in its VmJobSpec)
  std::string summary;
  int64_t timeout_s = 0;
  int64_t memory_bytes = 0;
  int64_t pids_max = 0;
  CpuClaim cpus;
  protocol::Network network = protocol::Network::kOffline;
  protocol::Platform platform = protocol::Platform::kLinux;
  // A windows job: the tree its workspace was prepared to when it started (its transfer disk).
  std::optional<std::string> tree_hash;
  int64_t bundle_bytes = 0;
};

class Job : private ExecutionSink {
 public:
  using State = JobState;

  Job(JobHost& host, std::string id, std::string caller, std::string workspace_key, RecordSettings record);
  ~Job() override;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Records a job that waits for admission: its history exists from now on, so clients can
  // follow it before it starts.
  Status enqueue(std::string summary);
  // Creates the cgroup, starts the process in the sandbox `box` (through the job starter), or in
  // `pooled`, a sandbox built ahead that becomes `box` (sandbox_pool.hpp), and watches it. On
  // error nothing is left but the job's history.
  Status start(const JobLaunch& launch, sandbox::CgroupDriver& cgroups, const sandbox::SandboxConfig& box,
               sandbox::Starter& starter, std::unique_ptr<PooledSandbox> pooled = nullptr);
  // A VM job (platform "windows", issue 8; job_vm.cpp): vm::VmJob drives the VM; its output
  // becomes ordinary output records.
  Status start_vm(const JobLaunch& launch, vm::VmJobSpec spec, sandbox::CgroupDriver& cgroups);
  // job_backend = systemd (unit_jobs.cpp): the same sandbox as a transient systemd unit.
  Status start_unit(const JobLaunch& launch, const sandbox::SandboxConfig& box, SystemdUnits& units);
  // Ends a job that never started (cancelled in the queue, refused, lost to a restart).
  void finish_unstarted(protocol::Outcome outcome, std::optional<std::string> detail,
                        std::optional<int64_t> retry_after_ms = std::nullopt);
  // A job of an earlier runner, loaded from the job table (finished, or accounted for at start).
  static std::unique_ptr<Job> restore(JobHost& host, std::string id, std::string caller, std::string workspace_key,
                                      RecordSettings record, std::string summary, int64_t created_at_ms,
                                      std::string terminal_json);

  // What the job changed in its workspace (Runner::scan_workspace); the job then finishes.
  void set_workspace_report(std::optional<std::string> tree_hash, int64_t bundle_bytes,
                            std::optional<protocol::WorkspaceReportJson> fields);

  // The job's record is durable (its `accepted` is on its way): its command may run. A Linux
  // job's sandbox may be built before this; its command waits for it (Execution::command_may_run).
  void on_record();
  // Its record could not be saved: it ends refused, `ran` none. A job whose sandbox is being built
  // or waits at its gate is killed first; its command never ran.
  void refuse_unrecorded(protocol::RefusalReason reason, std::string detail, std::optional<int64_t> retry_after_ms);
  struct Refusal {
    protocol::RefusalReason reason;
    std::string detail;
    std::optional<int64_t> retry_after_ms;
  };

  // Kills the whole tree; the terminal record says why.
  void cancel();
  void kill_for_shutdown();

  // The record's followers (JobRecord).
  void follow(Session& session, int64_t request_id, int64_t from_seq) { record_.follow(session, request_id, from_seq); }
  // The runner's steps of the start (recorded, admitted, spawn asked); the job marks its own.
  void mark_start_step(StartSteps::Step step) { start_steps_.mark(step); }
  void unfollow(Session& session) { record_.unfollow(session); }
  void session_drained(Session& session) { record_.session_drained(session); }
  bool pump_slice(size_t& budget) { return record_.pump_slice(budget); }
  void pump_all() { record_.pump_all(); }
  bool has_followers() const { return record_.has_followers(); }
  // Closes the output history of a finished, unfollowed job: true if the caller may delete it.
  bool expire_history() { return state_ == State::kFinished && record_.expire(); }
  int64_t finished_at_ms() const { return finished_at_ms_; }

  const std::string& id() const { return id_; }
  const std::string& caller() const { return caller_; }
  const std::string& workspace_key() const { return workspace_key_; }
  const std::string& summary() const { return summary_; }
  const std::string& cgroup_name() const { return cgroup_name_; }
  State state() const { return state_; }
  int64_t created_at_ms() const { return created_at_ms_; }
  int64_t started_at_ms() const { return started_at_ms_; }
  int64_t queue_wait_ms() const { return queue_wait_ms_; }
  const std::string& terminal_json() const { return record_.terminal_json(); }
  // How it ended (once finished), and that outcome as the terminal record has it (JSON).
  const protocol::Outcome& outcome() const { return outcome_; }
  const std::string& outcome_json() const { return outcome_json_; }
  int64_t memory_bytes() const { return memory_bytes_; }
  const CpuClaim& cpus() const { return cpus_; }
  // Direct jobs: the SHA-256 of the one-time secret (the secret itself is never kept).
  const std::optional<Sha256Digest>& secret_digest() const { return secret_digest_; }
  void set_secret_digest(const Sha256Digest& d) { secret_digest_ = d; }

 private:
  // ExecutionSink
  void execution_started() override;
  void execution_spawn_steps(const sandbox::SpawnTimes& t) override {
    start_steps_.mark_at(StartSteps::kStarterGot, t.received_ns);
    start_steps_.mark_at(StartSteps::kPlanned, t.planned_ns);
    start_steps_.mark_at(StartSteps::kChildStarted, t.child.started);
    start_steps_.mark_at(StartSteps::kMounted, t.child.mounted);
    start_steps_.mark_at(StartSteps::kConfined, t.child.confined);
    start_steps_.mark_at(StartSteps::kReady, t.child.ready);
    start_steps_.mark_at(StartSteps::kCloned, t.cloned_ns);
  }
  void execution_exited() override;
  Status execution_output(JobLog::Kind kind, std::string_view bytes) override;
  void execution_start_failed(const std::string& detail) override;
  void execution_ended(ExecutionEnd end) override;

  // Fields common to every started job, and the running state (cgroup name given).
  Status begin_running(const JobLaunch& launch);
  void arm_deadline();
  void on_timeout();
  // At shutdown: a workspace scan still running after kShutdownScanWaitMs is abandoned.
  void bound_scan_for_shutdown();
  void abandon_scan();
  void maybe_finish();
  // The execution releases what is left of the job (its cgroup, maybe on libuv's pool), then
  // conclude_released makes the terminal record from the execution's end and the workspace
  // report, and the job concludes. `wall_ms`: the job's time up to its end, not its release.
  void finish();
  void conclude_released(int64_t wall_ms);
  // The end of the job, however it ended: finished, the terminal record logged (or kept for
  // followers), the runner told.
  void set_terminal(const protocol::TerminalRecord& t);
  void conclude(const char* how);

  JobHost& host_;
  std::string id_, caller_, workspace_key_, summary_;
  std::string cgroup_name_;
  JobRecord record_;
  State state_ = State::kQueued;
  uint64_t queued_hr_ns_ = 0;
  StartSteps start_steps_;  // from construction, i.e. the exec.run that made the job
  int64_t queue_wait_ms_ = 0;
  int64_t finished_at_ms_ = 0;
  int64_t created_at_ms_ = 0;
  int64_t started_at_ms_ = 0;
  uint64_t started_hr_ns_ = 0;
  int64_t memory_bytes_ = 0;
  CpuClaim cpus_;
  std::optional<Sha256Digest> secret_digest_;
  protocol::Network network_ = protocol::Network::kOffline;
  protocol::Platform platform_ = protocol::Platform::kLinux;
  protocol::Outcome outcome_;
  std::string outcome_json_;

  std::unique_ptr<Execution> execution_;
  bool cancelled_ = false;
  bool shutting_down_ = false;
  bool command_started_ = false;
  bool on_record_ = false;
  bool started_waits_for_record_ = false;  // motor-init exec'd before the record was durable
  std::optional<Refusal> refusal_at_end_;
  uint64_t timeout_ms_ = 0;
  bool deadline_at_start_ = true;  // Linux: from the spawn; a VM: from the command's start in the guest
  std::optional<ExecutionEnd> end_;
  // The workspace report, asked for once the processes are gone and before the terminal record.
  bool report_requested_ = false, report_ready_ = false;
  bool releasing_ = false;  // finish() has run: the release is under way or done
  std::optional<std::string> tree_hash_;
  int64_t bundle_bytes_ = 0;
  std::optional<protocol::WorkspaceReportJson> workspace_report_;
  reactor::UvHandle<uv_timer_t> deadline_;
  reactor::UvHandle<uv_timer_t> scan_abandon_;  // shutdown: bounds the wait for the workspace scan
};

}  // namespace motor::runner
