// One job: its process tree under a cgroup, its output pipes, its timer, its on-disk history
// and the sessions that follow it. Everything here runs on the runner's loop.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motor/unique_fd.hpp"
#include "protocol/messages.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/cpu_claims.hpp"
#include "runner/job_log.hpp"
#include "runner/session_id.hpp"
#include "runner/sha256.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "sandbox/spawn.hpp"
#include "vm/vm_job.hpp"

namespace motor::runner {

class Runner;
class Session;

struct JobLaunch {
  std::string executable;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  std::string summary;
  int64_t timeout_s = 0;
  int64_t memory_bytes = 0;
  int64_t pids_max = 0;
  CpuClaim cpus;
  std::string network = "offline";
  std::string platform = "linux";
  // A windows job: the tree its workspace was prepared to when it started (its transfer disk).
  std::optional<std::string> tree_hash;
  int64_t bundle_bytes = 0;
};

class Job : private vm::VmJobSink {
 public:
  enum class State { kQueued, kRunning, kFinished };

  Job(Runner& runner, std::string id, std::string caller, std::string workspace_key);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  bool is_vm() const { return vm_ != nullptr; }

  // Records a job that waits for admission: its history exists from now on, so clients can
  // follow it before it starts.
  Status enqueue(std::string summary);
  // Creates the cgroup, starts the process in the sandbox `box` (through the job starter) and
  // watches it. On error nothing is left but the job's history.
  Status start(const JobLaunch& launch, sandbox::CgroupDriver& cgroups, const sandbox::SandboxConfig& box);
  // A VM job (platform "windows", issue 8; job_vm.cpp): vm::VmJob drives the VM and reports
  // back through the VmJobSink methods; output becomes ordinary output records.
  Status start_vm(const JobLaunch& launch, vm::VmJobSpec spec, sandbox::CgroupDriver& cgroups);
  // Ends a job that never started (cancelled in the queue, refused, lost to a restart).
  void finish_unstarted(protocol::Outcome outcome, std::optional<std::string> detail,
                        std::optional<int64_t> retry_after_ms = std::nullopt);
  // A job of an earlier runner, loaded from state.json (finished, or accounted for at start).
  static std::unique_ptr<Job> restore(Runner& runner, std::string id, std::string caller, std::string workspace_key,
                                      std::string summary, int64_t created_at_ms, std::string terminal_json);

  // What the job changed in its workspace (Runner::scan_workspace); the job then finishes.
  void set_workspace_report(std::optional<std::string> tree_hash, int64_t bundle_bytes,
                            std::optional<protocol::WorkspaceReportJson> fields);

  // Kills the whole tree; the terminal record says why.
  void cancel();
  void kill_for_shutdown();

  // Streams the job's records from `from_seq` to the session, as replies to `request_id`.
  void follow(Session& session, int64_t request_id, int64_t from_seq);
  void unfollow(Session& session);
  void session_drained(Session& session);
  // Feeds the followers that have room and records to read, until `budget` bytes are sent
  // (Runner::fan_out_slice: a fan-out to a thousand followers is spread over loop iterations).
  // True if some follower still has more to send now.
  bool pump_slice(size_t& budget);
  // Every follower may have more to read (new records, room again): queued for the next slice.
  void pump_all();
  // Deletes the job's output history (age limit); an attach then answers history_expired.
  void expire_history();
  int64_t finished_at_ms() const { return finished_at_ms_; }
  // Its state.json entry once finished (it never changes then), encoded once.
  std::string& persisted_cache() { return persisted_cache_; }

  const std::string& id() const { return id_; }
  const std::string& caller() const { return caller_; }
  const std::string& workspace_key() const { return workspace_key_; }
  const std::string& summary() const { return summary_; }
  const std::string& cgroup_name() const { return cgroup_name_; }
  State state() const { return state_; }
  int64_t created_at_ms() const { return created_at_ms_; }
  int64_t started_at_ms() const { return started_at_ms_; }
  int64_t queue_wait_ms() const { return queue_wait_ms_; }
  const std::string& terminal_json() const { return terminal_json_; }
  bool has_followers() const { return !followers_.empty(); }
  int64_t memory_bytes() const { return memory_bytes_; }
  const CpuClaim& cpus() const { return cpus_; }
  // Direct jobs: the SHA-256 of the one-time secret (the secret itself is never kept).
  const std::optional<Sha256Digest>& secret_digest() const { return secret_digest_; }
  void set_secret_digest(const Sha256Digest& d) { secret_digest_ = d; }

 private:
  struct Follower {
    SessionId session;  // looked up for each send: the session may have closed meanwhile
    int64_t request_id;
    JobLog::Cursor cursor;
    std::optional<int64_t> truncated_before_seq;  // to report on the next record sent
    uint64_t stalled_since_ms = 0;  // loop time its session first had no room for more; 0 = flowing
    bool wants_pump = false;        // has (or may have) records to send: fed in the next slice
  };
  void schedule_pump();
  void drop_stalled_followers();
  struct OutputPipe {
    Job* job = nullptr;
    reactor::UvHandle<uv_pipe_t> pipe;
    JobLog::Kind kind = JobLog::Kind::kStdout;
    bool eof = false;
    std::string pending;  // a chunk the log could not take yet (disk full): reading pauses
    char buf[64 * 1024];
  };

  // vm::VmJobSink (job_vm.cpp)
  void vm_command_started() override;
  void vm_output(bool is_stderr, std::string_view text) override;
  void vm_finished(const vm::VmOutcome& outcome) override;
  void vm_log(const std::string& line) override;
  void vm_prepare_output(std::string_view text) override;

  // The job starter's answer: watch the process, or end the job as refused.
  void on_spawned(Expected<sandbox::SpawnedProcess> spawned);
  void start_reading(OutputPipe& out);
  void confirm_started();
  void on_output(OutputPipe& out, ssize_t nread);
  bool append_output(OutputPipe& out, std::string_view bytes);
  void on_exit();
  void watch_oom();
  // `woken`: by the watcher's fd (else a re-check after a wake-up without a kill yet).
  void on_oom_event(bool woken);
  void on_timeout();
  void kill_tree(const char* why);
  void check_empty();
  void maybe_finish();
  void finish();
  // The terminal record's fields every job that started has (outcome left to the caller).
  protocol::TerminalRecord started_terminal() const;
  void append_record(const std::string& json);
  // The terminal record into the log; if it cannot be written yet (a full disk) it is kept in
  // memory for followers and written again on a timer.
  void append_terminal();
  void maybe_close_log();
  // The end of the job, however it ended (terminal_json_ is set): finished, the terminal
  // record logged (or kept for followers), the runner told.
  void conclude(const char* how, const protocol::Outcome& outcome);
  // The last seq a follower can get: the log's, or one more for a terminal it lacks.
  int64_t last_seq() const;
  // Sends what `f` has room for (at most *budget bytes, if given); true if the budget ran out
  // with more to send.
  bool pump(Follower& f, size_t* budget = nullptr);
  void retry_pending_output();
  Status open_log_for_replay();

  Runner& runner_;
  std::string id_, caller_, workspace_key_, summary_;
  std::string cgroup_name_;
  State state_ = State::kQueued;
  uint64_t queued_hr_ns_ = 0;
  int64_t queue_wait_ms_ = 0;
  int64_t finished_at_ms_ = 0;
  std::string persisted_cache_;
  int64_t created_at_ms_ = 0;
  int64_t started_at_ms_ = 0;
  uint64_t started_hr_ns_ = 0;
  int64_t memory_bytes_ = 0;
  CpuClaim cpus_;
  std::optional<Sha256Digest> secret_digest_;
  std::string network_ = "offline", platform_ = "linux";

  std::unique_ptr<sandbox::JobCgroup> cgroup_;
  std::optional<JobLog> log_;
  UniqueFd pidfd_;
  UniqueFd setup_status_;
  UniqueFd out_read_, err_read_;  // the job's output pipes, until the starter has answered
  pid_t pid_ = -1;
  bool started_confirmed_ = false;
  std::string setup_error_;  // the child failed before exec
  bool exited_ = false;
  int wait_status_ = 0;
  bool cgroup_empty_ = false;
  std::optional<std::string> killed_;  // "deadline" | "cancel"
  bool cancelled_ = false;
  bool kill_issued_ = false;
  int leftover_polls_ = 0;
  int unreadable_polls_ = 0;  // consecutive polls that could not read the cgroup's state
  bool shutting_down_ = false;
  std::string unlogged_terminal_;  // the terminal record while the log cannot take it  // test build ("cgroup-kill"): polls of a cgroup the runner does not kill
  std::string terminal_json_;
  // The workspace report, asked for once the processes are gone and before the terminal record.
  bool report_requested_ = false, report_ready_ = false;
  std::optional<std::string> tree_hash_;
  int64_t bundle_bytes_ = 0;
  std::optional<protocol::WorkspaceReportJson> workspace_report_;

  reactor::UvHandle<uv_poll_t> pidfd_poll_;
  reactor::UvHandle<uv_poll_t> setup_poll_;   // the child's setup status: EOF once exec'd
  reactor::UvHandle<uv_timer_t> deadline_;
  reactor::UvHandle<uv_timer_t> empty_poll_;   // cgroup emptiness after a kill
  reactor::UvHandle<uv_timer_t> retry_timer_;  // log writes after a full disk
  reactor::UvHandle<uv_timer_t> terminal_retry_;  // the terminal record's, after the job finished
  std::optional<sandbox::OomWatch> oom_watch_;  // live OOM watcher; the exit-time read confirms
  reactor::UvHandle<uv_poll_t> oom_poll_;
  reactor::UvHandle<uv_timer_t> oom_recheck_;  // v1 wakes before the killer has chosen
  int oom_rechecks_left_ = 0;
  int64_t oom_kills_seen_ = 0;
  std::unique_ptr<OutputPipe> stdout_, stderr_;
  std::unique_ptr<vm::VmJob> vm_;
  uint64_t vm_timeout_ms_ = 0;  // armed when the command starts in the guest, as a Linux job's
  std::vector<Follower> followers_;
  bool fan_out_queued_ = false;
  std::string scratch_;
};

}  // namespace motor::runner
