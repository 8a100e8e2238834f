#include "runner/job.hpp"

#include <chrono>
#include <simdjson.h>
#include <utility>

#include "reactor/slow_call.hpp"
#include "runner/job_linux.hpp"
#include "base/log.hpp"

namespace motor::runner {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// At shutdown, how long a workspace scan may still take before it is abandoned: a scan blocked
// for good (git opening a FIFO a job planted) must not hold up a SIGTERM until its own deadline.
constexpr uint64_t kShutdownScanWaitMs = 5000;

}  // namespace

Job::Job(JobHost& host, std::string id, std::string caller, std::string workspace_key, RecordSettings record)
    : host_(host),
      id_(std::move(id)),
      caller_(std::move(caller)),
      workspace_key_(std::move(workspace_key)),
      record_(host, id_, std::move(record)) {
  created_at_ms_ = now_ms();
  queued_hr_ns_ = uv_hrtime();
}

// A job is only destroyed once finished and unfollowed, or at exit: then the runner's sessions
// may be gone already, and a session's list of followed job ids needs no cleaning (an id that
// names no job is skipped).
Job::~Job() = default;

Status Job::enqueue(std::string summary) {
  summary_ = std::move(summary);
  if (auto s = record_.create(); !s) return s;
  state_ = State::kQueued;
  return {};
}

std::unique_ptr<Job> Job::restore(JobHost& host, std::string id, std::string caller, std::string workspace_key,
                                  RecordSettings record, std::string summary, int64_t created_at_ms,
                                  std::string terminal_json) {
  auto job = std::make_unique<Job>(host, std::move(id), std::move(caller), std::move(workspace_key), std::move(record));
  job->summary_ = std::move(summary);
  job->created_at_ms_ = created_at_ms;
  job->state_ = State::kFinished;
  job->finished_at_ms_ = created_at_ms;  // a restored job's end is not recorded: its creation bounds it
  // Decoded once, here (the job table is read at start): exec.list shows the outcome as recorded.
  simdjson::dom::parser parser;
  simdjson::dom::element outcome;
  if (!parser.parse(terminal_json)["outcome"].get(outcome)) {
    job->outcome_json_ = simdjson::minify(outcome);
    if (auto parsed = protocol::parse_outcome(outcome)) job->outcome_ = *parsed;
  }
  job->record_.restore(std::move(terminal_json));
  return job;
}

void Job::finish_unstarted(protocol::Outcome outcome, std::optional<std::string> detail, std::optional<int64_t> retry_after_ms) {
  if (state_ != State::kQueued) return;
  protocol::TerminalRecord t;
  t.job_id = id_;
  t.outcome = std::move(outcome);
  t.ran = protocol::Ran::kNone;
  t.refusal_detail = std::move(detail);
  t.retry_after_ms = retry_after_ms;
  t.queue_wait_ms = static_cast<int64_t>((uv_hrtime() - queued_hr_ns_) / 1000000);
  t.network = network_;
  t.platform = platform_;
  t.seq = record_.next_seq();
  set_terminal(t);
  conclude("ended before it started");
}

Status Job::begin_running(const JobLaunch& launch) {
  summary_ = launch.summary;
  memory_bytes_ = launch.memory_bytes;
  network_ = launch.network;
  platform_ = launch.platform;
  cpus_ = launch.cpus;
  timeout_ms_ = static_cast<uint64_t>(launch.timeout_s) * 1000;
  if (!record_.has_log()) {
    if (auto s = record_.create(); !s) return s;
  }
  state_ = State::kRunning;
  // The job table records the job in this loop iteration, before its `accepted` goes out; if the
  // runner dies first, the restart finds the cgroup unnamed by any record and kills it.
  host_.job_changed();
  started_hr_ns_ = uv_hrtime();
  queue_wait_ms_ = static_cast<int64_t>((started_hr_ns_ - queued_hr_ns_) / 1000000);
  return {};
}

Status Job::start(const JobLaunch& launch, sandbox::CgroupDriver& cgroups, const sandbox::SandboxConfig& box,
                  sandbox::Starter& starter, std::unique_ptr<PooledSandbox> pooled) {
  cgroup_name_ = "job-" + id_;
  if (auto s = begin_running(launch); !s) return s;
  LinuxLaunch linux_launch{id_, cgroup_name_, summary_, launch.command, launch.memory_bytes, launch.pids_max,
                           launch.cpus, caller_};
  ExecutionSink& sink = *this;
  auto created = std::make_unique<LinuxExecution>(host_.loop(), std::move(linux_launch), sink);
  LinuxExecution& execution = *created;
  execution_ = std::move(created);
  if (on_record_) execution.command_may_run();  // it waited in the queue past its save
  // The deadline runs from now: a child stuck before exec is killed with its cgroup like any job.
  deadline_at_start_ = true;
  arm_deadline();
  if (auto s = execution.start(cgroups, starter, box, std::move(pooled)); !s) {
    execution_.reset();
    deadline_.close();
    state_ = State::kQueued;  // never ran: the runner ends it as refused
    return s;
  }
  return {};
}

void Job::arm_deadline() {
  if (deadline_.live()) return;
  if (const int rc = uv_timer_init(host_.loop(), deadline_.get()); rc != 0) {
    log_job(id_, "uv_timer_init: {}; the job has no deadline", uv_strerror(rc));
    return;
  }
  deadline_.initialized(this);
  if (const int rc = uv_timer_start(deadline_.get(), [](uv_timer_t* h) {
        if (auto* job = reactor::owner_of<Job>(h)) job->on_timeout();
      }, timeout_ms_, 0); rc != 0) {
    log_job(id_, "uv_timer_start: {}; the job has no deadline", uv_strerror(rc));
  }
}

void Job::on_record() {
  if (on_record_) return;
  on_record_ = true;
  if (execution_ && !refusal_at_end_) execution_->command_may_run();
  if (std::exchange(started_waits_for_record_, false)) execution_started();
}

void Job::refuse_unrecorded(protocol::RefusalReason reason, std::string detail, std::optional<int64_t> retry_after_ms) {
  if (state_ == State::kQueued) return finish_unstarted(protocol::refused(reason), detail.substr(0, 1024), retry_after_ms);
  if (state_ != State::kRunning || refusal_at_end_) return;
  refusal_at_end_ = Refusal{reason, std::move(detail), retry_after_ms};
  log_job(id_, "not on record; killing its sandbox before its command runs");
  if (execution_) execution_->kill(std::nullopt);
}

void Job::execution_started() {
  start_steps_.mark(StartSteps::kExecd);
  if (!on_record_) {  // the command waits at its gate: it starts with the record (on_record)
    started_waits_for_record_ = !refusal_at_end_;
    return;
  }
  if (command_started_) return;
  command_started_ = true;
  started_at_ms_ = now_ms();
  record_.append_record(protocol::encode_started(record_.next_seq(), queue_wait_ms_, started_at_ms_));
  host_.job_started(static_cast<double>(uv_hrtime() - queued_hr_ns_) / 1e9);
  // A VM job's deadline counts from here, as a Linux job's counts from its spawn: the boot is
  // bounded on its own (vm_agent_timeout_s and the helpers' call timeouts).
  if (!deadline_at_start_) arm_deadline();
}

void Job::execution_exited() {
  start_steps_.mark(StartSteps::kExited);
  if (deadline_.live()) uv_timer_stop(deadline_.get());
}

Status Job::execution_output(JobLog::Kind kind, std::string_view bytes) {
  start_steps_.mark(StartSteps::kFirstOutput);
  auto seq = record_.append(kind, bytes);
  if (!seq) return seq.error();
  record_.pump_all();
  return {};
}

void Job::execution_start_failed(const std::string& detail) {
  deadline_.close();
  state_ = State::kQueued;  // never ran: the runner ends it as refused
  if (refusal_at_end_) {
    Refusal r = *refusal_at_end_;
    return finish_unstarted(protocol::refused(r.reason), std::move(r.detail), r.retry_after_ms);
  }
  host_.job_start_failed(*this, detail);
}

void Job::execution_ended(ExecutionEnd end) {
  reactor::SlowCall timed("ending a job", reactor::SlowCall::kTraceOnly);
  end_ = std::move(end);
  maybe_finish();
}

void Job::on_timeout() {
  log_job(id_, "deadline reached; killing the job's process tree");
  if (state_ == State::kRunning && execution_) execution_->kill(protocol::KillReason::kDeadline);
}

void Job::cancel() {
  if (state_ != State::kRunning || cancelled_) return;
  cancelled_ = true;
  log_job(id_, "cancelled; killing the job's process tree");
  if (execution_) execution_->kill(protocol::KillReason::kCancel);
}

void Job::kill_for_shutdown() {
  // The runner is stopping: output the log cannot take (a full disk) is dropped, so the job's
  // pipes drain and it can end.
  shutting_down_ = true;
  if (execution_) execution_->shutdown();
  bound_scan_for_shutdown();
  if (state_ != State::kRunning || cancelled_) return;
  cancelled_ = true;
  log_job(id_, "the runner is shutting down; killing the job's process tree");
  // Killed "shutdown": nobody cancelled it (the client exits 71, not 130).
  if (execution_) execution_->kill(protocol::KillReason::kShutdown);
}

void Job::maybe_finish() {
  if (state_ == State::kFinished || !end_) return;
  // A job that ran on the host's workspace gets it scanned first (a child process); it finishes
  // when the report arrives.
  if (end_->scan_workspace && !report_ready_) {
    if (!report_requested_) {
      report_requested_ = true;
      host_.scan_workspace(*this);
      bound_scan_for_shutdown();
    }
    return;
  }
  finish();
}

void Job::bound_scan_for_shutdown() {
  if (!shutting_down_ || !report_requested_ || report_ready_ || scan_abandon_.live()) return;
  if (const int rc = uv_timer_init(host_.loop(), scan_abandon_.get()); rc != 0) {
    log_job(id_, "uv_timer_init: {}; the workspace scan is abandoned now", uv_strerror(rc));
    return abandon_scan();
  }
  scan_abandon_.initialized(this);
  if (const int rc = uv_timer_start(scan_abandon_.get(), [](uv_timer_t* h) {
        if (auto* job = reactor::owner_of<Job>(h)) job->abandon_scan();
      }, kShutdownScanWaitMs, 0); rc != 0) {
    log_job(id_, "uv_timer_start: {}; the workspace scan is abandoned now", uv_strerror(rc));
    abandon_scan();
  }
}

void Job::abandon_scan() {
  if (report_ready_) return;
  log_job(id_, "the runner is shutting down and the workspace scan has not ended after {} ms: abandoned (its "
          "helper dies with the runner)", kShutdownScanWaitMs);
  set_workspace_report(std::nullopt, 0, std::nullopt);
}

void Job::set_workspace_report(std::optional<std::string> tree_hash, int64_t bundle_bytes,
                               std::optional<protocol::WorkspaceReportJson> fields) {
  if (report_ready_) return;  // a scan that ends after it was abandoned (shutdown)
  tree_hash_ = std::move(tree_hash);
  bundle_bytes_ = bundle_bytes;
  workspace_report_ = std::move(fields);
  if (!workspace_report_) log_job(id_, "workspace_changes: not computed (the workspace was never prepared, or the scan failed)");
  report_ready_ = true;
  maybe_finish();
}

void Job::finish() {
  if (releasing_) return;
  releasing_ = true;
  deadline_.close();
  scan_abandon_.close();
  const auto wall_ms = static_cast<int64_t>((uv_hrtime() - started_hr_ns_) / 1000000);
  // What is left of the job on the host goes before the terminal record, so a client that saw
  // `terminal` finds nothing of it.
  execution_->release([this, wall_ms] { conclude_released(wall_ms); });
}

void Job::conclude_released(int64_t wall_ms) {
  ExecutionEnd& end = *end_;
  protocol::TerminalRecord t;
  t.job_id = id_;
  t.platform = platform_;
  t.network = network_;
  t.killed = end.killed;
  t.pipestatus = end.pipestatus;
  t.wall_ms = wall_ms;
  t.queue_wait_ms = queue_wait_ms_;
  t.cpus = cpus_.list();
  t.cpus_shared = cpus_.overlapping;
  t.outcome = end.outcome;
  t.ran = end.ran;
  t.refusal_detail = end.refusal_detail;
  if (refusal_at_end_) {  // killed at its gate: its command never ran
    t.outcome = protocol::refused(refusal_at_end_->reason);
    t.ran = protocol::Ran::kNone;
    t.killed.reset();
    t.pipestatus.reset();
    t.refusal_detail = refusal_at_end_->detail.substr(0, 1024);
    t.retry_after_ms = refusal_at_end_->retry_after_ms;
  }
  t.oom_killed = end.oom_killed;
  t.cpu_user_us = end.cpu_user_us;
  t.cpu_system_us = end.cpu_system_us;
  t.memory_peak_bytes = end.memory_peak_bytes;
  t.tree_hash = tree_hash_;
  t.bundle_bytes = bundle_bytes_;
  t.workspace = end.workspace ? end.workspace : workspace_report_;
  t.seq = record_.next_seq();
  set_terminal(t);
  start_steps_.mark(StartSteps::kTerminal);
  log_debug("job {}: start steps (us): {}", id_, start_steps_.line());
  conclude("finished");
}

void Job::set_terminal(const protocol::TerminalRecord& t) {
  outcome_ = t.outcome;
  protocol::JsonWriter w;
  protocol::write_outcome(w, t.outcome);
  outcome_json_ = w.take();
  state_ = State::kFinished;
  finished_at_ms_ = now_ms();
  record_.finish(protocol::encode_terminal(t));
}

void Job::conclude(const char* how) {
  // Structured fields for the journal (base/log.hpp); on stderr they follow the line.
  const protocol::Outcome& o = outcome_;
  const std::string detail = o.kind == protocol::Outcome::Kind::kExit     ? std::to_string(o.code)
                             : o.kind == protocol::Outcome::Kind::kSignal ? std::to_string(o.signal)
                                                                          : o.reason;
  log_entry(LogLevel::kInfo,
            {{"MOTOR_JOB_ID", id_}, {"MOTOR_CALLER", caller_}, {"MOTOR_OUTCOME", protocol::to_wire(o.kind)},
             {"MOTOR_OUTCOME_DETAIL", detail}},
            fmt::format("{}: {}", how, record_.terminal_json()));
  host_.job_finished(*this);
}

}  // namespace motor::runner
