// The daemon: one libuv loop serving every client session and job on the host.
#pragma once

#include "motor/simdjson_fwd.hpp"
#include <uv.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/messages.hpp"
#include "reactor/stall_meter.hpp"
#include "reactor/iteration_budget.hpp"
#include "reactor/turns_per_iteration.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/admission.hpp"
#include "runner/admission_control.hpp"
#include "runner/cache_eviction.hpp"
#include "runner/cache_fill.hpp"
#include "config/config.hpp"
#include "runner/metrics.hpp"
#include "runner/cpu_claims.hpp"
#include "runner/job.hpp"
#include "runner/sandbox_pool.hpp"
#include "runner/systemd_units.hpp"
#include "sandbox/job_starter.hpp"
#include "runner/job_log_stock.hpp"
#include "runner/job_table.hpp"
#include "runner/method_table.hpp"
#include "runner/notify.hpp"
#include "netpolicy/outbound.hpp"
#include "runner/session_id.hpp"
#include "runner/state_store.hpp"
#include "runner/state_writer.hpp"
#include "runner/vm_host.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "workspace/child_process.hpp"
#include "workspace/workspaces.hpp"

namespace motor::runner {

class Session;

// Retry hints of transient refusals.
inline constexpr int64_t kRetryWhenFullMs = 5000;
inline constexpr int64_t kRetryWhenDrainingMs = 30000;
inline constexpr int64_t kRetryWhenDiskFullMs = 60000;
// What recording one more job may take on the state directory's filesystem besides a save of
// state.json (its log directory, its first records, its terminal record).
inline constexpr int64_t kStateSaveHeadroomBytes = 1 << 20;

// The runner's parts (docs/architecture.md): sessions bring framed requests; the method table
// sends each to its handler (runner_methods.cpp, run_request.cpp, workspace_requests.cpp); the
// job table holds every job; admission starts queued jobs when they fit (job_launch.cpp builds
// what they run in); state saving makes changes durable once per loop iteration.
class Runner : public JobHost, private AdmissionHost {
 public:
  Runner(uv_loop_t* loop, config::Config config);
  ~Runner() override;

  // Checks the accounts and cgroups, recovers what an earlier runner left, and listens (once
  // the recovered jobs' workspace scans have ended on the loop: a failure then stops the loop,
  // and start_failure() says why).
  Status start();
  const std::optional<Error>& start_failure() const { return start_failure_; }

  const config::Config& config() const { return config_; }
  // Where SIGHUP reads the config again (unset: SIGHUP only logs that nothing was reloaded).
  void set_config_source(std::function<Expected<config::Config>()> source) { config_source_ = std::move(source); }
  // SIGHUP: takes the keys that may change while running, logs the changed ones it kept.
  void reload();
  uv_loop_t* loop() const override { return loop_; }
  const sandbox::Account& job_account() const { return job_account_; }
  sandbox::JobStarter& job_starter() { return job_starter_; }
  std::string job_dir(const std::string& job_id) const { return config_.state_dir + "/jobs/" + job_id; }
  // Where a job's record lives and how it is bounded.
  RecordSettings record_settings(const std::string& job_id) const {
    return RecordSettings{job_dir(job_id), config_.job_log_max_bytes, config_.stalled_client_timeout_s, log_stock_.get()};
  }

  // From sessions (runner_sessions.cpp).
  void session_opened(Session* session);
  void session_closed(Session& session);
  void session_drained(Session& session);
  void handle_frame(Session& session, const std::string& frame);
  // The open session with this id, or null once it has closed.
  Session* find_session(SessionId id) const override;
  // Bytes queued to all clients together (client_buffer_total bounds them): past the bound no
  // stream record goes out, and the clients that read nothing are cut off (they reattach).
  void buffered_changed(int64_t delta);
  bool buffered_has_room() const { return buffered_bytes_ < config_.client_buffer_total_bytes; }
  // Replies to requests may go past the total by an eighth of it (at least 1 MiB): output that
  // fills the total never keeps a request waiting (an operator's `runner.status` above all).
  // Each session's replies are bounded by its own buffer besides (Session::serve_pending).
  bool replies_have_room() const {
    const int64_t total = config_.client_buffer_total_bytes;
    return buffered_bytes_ < total + std::max<int64_t>(total / 8, int64_t{1} << 20);
  }
  // At most kRequestsPerIteration requests are answered per loop iteration, all sessions
  // together: a session past that waits, and is served on in a later iteration (in turn).
  bool take_request_turn() { return request_turns_.take(); }
  void await_request_turn(Session& session);
  // A job has followers to feed: they are fed a slice per loop iteration (fan-out in slices).
  void schedule_fan_out(const std::string& job_id) override;

  // From jobs. State changes are saved once per loop iteration, however many jobs changed in
  // it: a save (write, fsync, rename, fsync) costs milliseconds, and 20 jobs starting at once
  // must not pay it 20 times. `then` runs once the change is durable; with `failed`, that runs
  // instead if the write that would have recorded it fails (it is retried on a timer anyway).
  void request_save(std::function<void()> then = nullptr, std::function<void(const Error&)> failed = nullptr);
  void job_changed() override { request_save(); }
  void job_finished(Job& job) override;
  // The job starter could not start `job` (Job::start had succeeded): it ends as refused.
  void job_start_failed(Job& job, const std::string& detail) override;
  // A job cgroup that is still busy at the job's end: removed in the background.
  void retire_cgroup(std::vector<std::string> dirs, std::string what) {
    cgroup_reaper_.reap(sandbox::remains_of_dirs(std::move(dirs), std::move(what)));
  }
  void job_started(double start_latency_s) override { metrics_.observe_start_latency(start_latency_s); }
  void remove_history(const std::string& job_id);
  // A job's processes are gone: its workspace is scanned for what it changed, then the job
  // gets the report (Job::set_workspace_report) and finishes.
  void scan_workspace(Job& job) override;
  // Names of this runner's workspace helper cgroups start with it (start_workspaces).
  static std::string helper_cgroup_prefix();
  // Workspaces (src/workspace): for other job kinds, e.g. a VM job's transfer disk.
  workspace::Workspaces* workspaces() { return workspaces_.get(); }
  // A job or workspace starts from the repository's published warm target: counted as a hit
  // (motor_cache_warm_target_hits_total), marked used now, and kept from eviction and
  // `motor cache clear` while the returned use is held (cache_sweep.cpp).
  TargetUses::Use warm_target_used(const std::string& caller, const std::string& repository_root);

 private:
  // recovery.cpp: what an earlier runner left (state.json, job logs, cgroups).
  Status recover();  // may leave workspace scans running (recovery_scans_)
  int recovery_scans_ = 0;
  bool awaiting_recovery_ = false;  // start() has done the rest: the last scan calls finish_start
  std::optional<Error> start_failure_;
  void recover_queued(PersistedJob& pj);
  void recover_unfinished(PersistedJob& pj, std::set<std::string>& known_cgroups);
  // A lost job's workspace fields: the tree its prepared workspace holds (false: none).
  bool recovered_workspace_fields(const PersistedJob& pj, protocol::TerminalRecord& t);
  // A lost job's terminal record (outcome_unknown) logged after its other records, and the job
  // restored with it.
  void log_unknown_terminal(const PersistedJob& pj, protocol::TerminalRecord t);
  void record_unfinished(const PersistedJob& pj, std::string terminal, bool unknown);
  // After recovery (and its workspace scans, which run on the loop): the state is saved and the
  // runner listens. A failure here stops the loop; start_failure() says why.
  void finish_start();
  // start()'s second half, from recover() on: at once, or once the systemd backend's start-up
  // on the loop is done (unit_jobs.cpp). abandon_start: a failure after start() returned.
  Status start_rest();
  void abandon_start(const Error& e);
  void restore_job(const PersistedJob& pj, std::string terminal_json);
  Status listen();

  // The methods (runner_methods.cpp): one table entry each.
  void register_methods();
  void handle_cancel(Session& session, const protocol::Request& request);
  void handle_attach(Session& session, const protocol::Request& request);
  void handle_status(Session& session, const protocol::Request& request);
  void handle_list(Session& session, const protocol::Request& request);
  void handle_hello(Session& session, const protocol::Request& request);
  void handle_identify(Session& session, const protocol::Request& request);
  void handle_runner_status(Session& session, const protocol::Request& request);
  void handle_drain(Session& session, const protocol::Request& request, bool drain);
  // exec.run (run_request.cpp): checked, recorded, queued; `accepted` once it is durable.
  void handle_run(Session& session, const protocol::Request& request);
  // The limits of a run request, or the refusal/error already sent (nullopt).
  std::optional<PendingStart> check_run(Session& session, const protocol::Request& r, protocol::RunParams params,
                                        PriorityClass* priority);
  // A refusal before the job exists (full, draining, disk): nullopt if none.
  bool refused_at_the_door(Session& session, const protocol::Request& r, const protocol::RunParams& p);
  void accept_job(Session& session, int64_t request_id, PendingStart pending, PriorityClass priority);
  // workspace.* (workspace_requests.cpp)
  Status start_workspaces();
  void handle_workspace_prepare(Session& session, const protocol::Request& request);
  void handle_workspace_upload(Session& session, const protocol::Request& request);
  void handle_workspace_finish(Session& session, const protocol::Request& request);
  void handle_workspace_list(Session& session, const protocol::Request& request);
  void handle_workspace_drop(Session& session, const protocol::Request& request);

  // AdmissionHost (job_launch.cpp)
  bool waits_on_workspace(const std::string& job_id) const override;
  bool has_room_for(const QueueEntry& entry) const override;
  void start_admitted(const std::string& job_id, PendingStart pending) override;
  bool may_start_before_record(const PendingStart& pending) const override;
  void queue_wait_exceeded(const std::string& job_id) override;
  void start_linux_job(Job& job, const PendingStart& pending, const std::string& workspace_dir);
  bool start_vm_job(Job& job, const PendingStart& pending, const std::string& workspace_dir);
  // job_backend = systemd (unit_jobs.cpp): the bus, the leftover units, and a job as a unit.
  // Calls start_rest() itself, at once or from the loop once systemd answered.
  Status start_systemd_backend();
  void systemd_backend_started(Expected<std::vector<std::string>> leftovers);
  void start_unit_job(Job& job, const JobLaunch& launch, const sandbox::SandboxConfig& box);
  // Compile-cache fills (cache_fill_jobs.cpp, docs/compile-cache.md): a verified tip starts one.
  void maybe_start_fill(const std::string& caller, const protocol::RunParams& params, const FillTip& tip);
  void start_fill_job(Job& job, const PendingStart& pending);
  void fill_finished(Job& job);
  // A repository's published warm target was removed (evicted, cleared): so is its spare.
  void warm_target_gone(const std::string& name);
  void fill_sandbox(const FillStart& fill, sandbox::SandboxConfig& box) const;
  Status start_cache_fills();
  CacheFills cache_fills_{""};
  sandbox::Account cache_account_;  // motor-cache: fills run as it
  std::string cache_group_name_;
  std::string rustc_version_;  // `rustc --version` as the runner found it at start ("" = none)
  // Eviction and `motor cache status|clear` (cache_sweep.cpp, cache_requests.cpp).
  Status start_cache_sweeps();
  void sweep_cache(std::function<void()> then = nullptr);
  void cache_measured(workspace::ChildResult r);
  std::vector<CacheItem> cache_items(const std::vector<MeasuredPath>& measured) const;
  // A queued or running fill holds its whole repository (its end publishes into it); a held
  // warm target (a workspace copying it) holds it too: neither eviction nor clear touches it.
  bool cache_in_use(const std::string& name, const RepositoryFill& f) const {
    return !f.building_job.empty() || target_uses_.in_use(name);
  }
  bool evict_cache_item(const CacheItem& item);  // renamed into trash/, removed by a child
  void remove_in_cache(const std::string& relative_glob);  // `rm -rf` in a child, below the cache root
  void clear_cache_of(const std::string& name);
  bool refuse_unless_operator(Session& session, const protocol::Request& r);
  void handle_cache_status(Session& session, const protocol::Request& request);
  void handle_cache_clear(Session& session, const protocol::Request& request);
  void write_cache_status(protocol::JsonWriter& w, int64_t now_ms) const;
  TargetUses target_uses_;
  reactor::UvHandle<uv_timer_t> cache_sweep_timer_;
  bool cache_sweeping_ = false, cache_sweep_again_ = false;
  std::vector<std::function<void()>> cache_sweep_waiters_, cache_sweep_next_;
  std::vector<MeasuredPath> cache_measured_;  // the last measurement, less what went since
  int64_t cache_measured_at_ms_ = 0;
  uint64_t cache_trash_seq_ = 0;
  // Ends a job that never started as refused (metrics counted).
  void refuse_queued(Job& job, protocol::RefusalReason reason, const std::string& detail,
                     std::optional<int64_t> retry_after_ms = std::nullopt);

  int64_t free_disk_bytes() const;
  void answer_drain_waiters();
  void write_metrics();
  std::vector<std::pair<SessionId, int64_t>> drain_waiters_;
  // A job whose first save failed: it ends as refused (runner_disk_full), and `session` hears it.
  void refuse_unrecorded(const std::string& job_id, SessionId session, int64_t request_id, const Error& e);
  // The job's first save is durable: admission may start it, its command may run.
  void job_recorded(const std::string& job_id);
  // Its first save failed: out of the queue, counted, and refused (runner_disk_full), at once if
  // it was queued, else once its sandbox, killed at its gate, is gone (Job::refuse_unrecorded).
  void refuse_for_its_record(Job& job, std::string detail, std::optional<int64_t> retry_after_ms);
  void refuse_job(Session& session, int64_t request_id, protocol::RefusalReason reason, const std::string& detail,
                  std::optional<int64_t> retry_after_ms = std::nullopt);
  // The session is the job's caller, or the operator: it sees the job without a secret.
  static bool owns(const Session& session, const Job& job);
  // The job, if it exists and the session may see it; same answer for "unknown" and "not yours".
  Job* visible_job(Session& session, const protocol::JobRef& ref);
  void begin_shutdown(int signum);
  void kill_for_shutdown();  // every running job
  void maybe_exit();
  void evict_finished();
  void update_status();
  // state_saving.cpp
  Status save_state();  // on the loop: start-up, shutdown
  PersistedJob persisted(const Job& job) const;
  std::string take_state_change();  // encode_change of what changed since the last one
  // Room for what recording a new job takes on the state directory's filesystem (its log and
  // a save of state.json beside the old one); an error says why not.
  Status state_room() const;
  size_t last_state_bytes_ = 0;
  UniqueFd state_dir_lock_, cgroup_parent_lock_;  // runner_lock.hpp

  Status start_timers_and_signals();
  uv_loop_t* loop_;
  config::Config config_;
  std::function<Expected<config::Config>()> config_source_;
  sandbox::Account job_account_;
  std::string job_group_name_;
  std::string init_path_;  // motor-init on the host
  CpuClaims cpu_claims_ = CpuClaims::from_sysfs();
  std::unique_ptr<sandbox::CgroupDriver> cgroups_;
  sandbox::CgroupReaper cgroup_reaper_;  // every job cgroup ends through it (before jobs_: outlives them)
  // job_backend = systemd only; before jobs_, so its bus outlives their units' executions.
  std::unique_ptr<SystemdUnits> systemd_units_;
  reactor::StallMeter stall_;
  reactor::IterationBudget step_budget_;  // spreads a burst's starts, ends and requests over iterations
  SystemdNotifier notifier_;
  std::unique_ptr<simdjson::dom::parser> parser_;  // (by pointer: simdjson_fwd.hpp)
  MethodTable methods_;
  reactor::UvHandle<uv_pipe_t> listener_;
  reactor::UvHandle<uv_signal_t> sigterm_, sigint_, sighup_;
  reactor::UvHandle<uv_timer_t> shutdown_timer_;
  reactor::UvHandle<uv_check_t> saver_;  // runs after the iteration's I/O callbacks
  bool save_pending_ = false;
  // New jobs' logs, made ahead on libuv's pool (a burst of twenty exec.run takes them all).
  static constexpr size_t kReadyJobLogs = 32;
  std::unique_ptr<JobLogStock> log_stock_;  // from start() on
  JobTable jobs_;
  Admission admission_;
  int64_t memory_budget_ = 0;  // host memory minus the reserve
  Metrics metrics_;
  reactor::UvHandle<uv_timer_t> metrics_timer_;
  // A metrics file write is on libuv's pool (its fsyncs never stall the loop); a tick that finds
  // the last one still being written skips its turn. Shared with the write, which may outlive us.
  std::shared_ptr<bool> metrics_writing_ = std::make_shared<bool>(false);
  reactor::UvHandle<uv_timer_t> history_timer_;
  void expire_histories();
  std::vector<StateWriter::Waiter> after_save_;
  StateWriter state_writer_;
  sandbox::JobStarter job_starter_;
  // Sandboxes built ahead of jobs (sandbox_pool.hpp); after job_starter_, so it goes first.
  std::unique_ptr<SandboxPool> sandbox_pool_;
  void configure_sandbox_pool();
  std::unique_ptr<workspace::Workspaces> workspaces_;
  std::unique_ptr<VmHost> vm_host_;  // windows jobs (issue 8); created at start
  std::map<SessionId, Session*> sessions_;  // open sessions, by id (session.hpp: SessionId)
  // Twenty exec.run read in one poll cost 4-6 ms of the loop's CPU at once (each makes its job's
  // log, queues it and encodes its row); four per iteration keep an iteration near 1 ms.
  static constexpr size_t kRequestsPerIteration = 4;
  reactor::TurnsPerIteration request_turns_{loop_, kRequestsPerIteration};
  // The sessions of this account (uid), or of this bridged caller, that count against
  // max_sessions_per_uid; 0 if none.
  size_t sessions_of(const Session& session) const;
  // The peer's account may use the runner (privileged, allowed_uids, allowed_groups).
  bool peer_allowed(const Session& session) const;
  void start_session_sweep();
  void sweep_sessions();  // frame_timeout_s, session_idle_timeout_s
  void cut_off_unread();  // the total of buffered bytes is over client_buffer_total
  void wake_followers();
  void fan_out_slice();
  reactor::UvHandle<uv_timer_t> session_sweep_;
  reactor::UvHandle<uv_check_t> shedder_;
  int64_t buffered_bytes_ = 0, buffered_peak_bytes_ = 0;
  bool wake_followers_ = false;
  reactor::UvHandle<uv_idle_t> fan_out_;
  std::deque<std::string> fan_out_jobs_;  // by id: a job may be gone by its turn
  bool draining_ = false;
  bool shutting_down_ = false;
  std::unique_ptr<netpolicy::Outbound> outbound_;  // only when outbound_network is enabled
  uint64_t started_hr_ns_ = 0;
};

}  // namespace motor::runner
