// A Job whose command runs in a VM (platform "windows", issue 8). vm::VmJob does the work; this
// file turns what it reports into the job's ordinary records: `started` once the command runs in
// the guest, `output` for each bounded chunk, `terminal` once the VM is gone and its overlay
// deleted.
#include <sys/wait.h>

#include <chrono>

#include "runner/job.hpp"
#include "runner/log.hpp"
#include "runner/runner.hpp"

namespace motor::runner {
namespace {
int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Status Job::start_vm(const JobLaunch& launch, vm::VmJobSpec spec, sandbox::CgroupDriver& cgroups) {
  summary_ = launch.summary;
  memory_bytes_ = launch.memory_bytes;
  network_ = launch.network;
  platform_ = launch.platform;
  cpus_ = launch.cpus;
  // The disk tools' cgroup: named in state.json, so a restarted runner removes a leftover one.
  cgroup_name_ = spec.disk_cgroup;
  if (!log_) {
    auto log = JobLog::create(runner_.job_dir(id_), runner_.config().job_log_max_bytes);
    if (!log) return log.error();
    log_.emplace(std::move(*log));
  }
  state_ = State::kRunning;
  runner_.request_save();
  started_hr_ns_ = uv_hrtime();
  queue_wait_ms_ = static_cast<int64_t>((started_hr_ns_ - queued_hr_ns_) / 1000000);
  tree_hash_ = launch.tree_hash;
  bundle_bytes_ = launch.bundle_bytes;
  // The deadline counts from `started`, as a Linux job's: the boot is bounded on its own
  // (vm_agent_timeout_s and the helpers' call timeouts), and a cancel works at any time.
  vm_timeout_ms_ = static_cast<uint64_t>(launch.timeout_s) * 1000;

  log_job(id_, "starting VM {} on cpus {}: {}", spec.domain_name, cpus_.list(), summary_);
  vm::VmJobSink& sink = *this;
  vm_ = std::make_unique<vm::VmJob>(runner_.loop(), cgroups, std::move(spec), sink);
  vm_->start();
  return {};
}

void Job::vm_command_started() {
  uv_timer_init(runner_.loop(), deadline_.get());
  deadline_.initialized(this);
  uv_timer_start(deadline_.get(), [](uv_timer_t* h) {
    if (auto* job = reactor::owner_of<Job>(h)) job->on_timeout();
  }, vm_timeout_ms_, 0);
  started_confirmed_ = true;
  started_at_ms_ = wall_now_ms();
  append_record(protocol::encode_started(log_->last_seq() + 1, queue_wait_ms_, started_at_ms_));
  runner_.job_started(static_cast<double>(uv_hrtime() - queued_hr_ns_) / 1e9);
}

void Job::vm_output(bool is_stderr, std::string_view text) {
  if (!started_confirmed_) return;
  // Chunks are bounded (one guest-file-read each), well under a log record's limit.
  for (size_t at = 0; at < text.size(); at += JobLog::kMaxPayload) {
    auto seq = log_->append(is_stderr ? JobLog::Kind::kStderr : JobLog::Kind::kStdout, text.substr(at, JobLog::kMaxPayload));
    if (!seq) {
      log_job(id_, "{}; VM output dropped", seq.error().message);
      return;
    }
  }
  pump_all();
}

void Job::vm_log(const std::string& line) { log_job(id_, "{}", line); }

// The dependency preparation's output: stderr records before `started` (docs/protocol.md).
void Job::vm_prepare_output(std::string_view text) {
  for (size_t at = 0; at < text.size(); at += JobLog::kMaxPayload) {
    if (auto seq = log_->append(JobLog::Kind::kStderr, text.substr(at, JobLog::kMaxPayload)); !seq) {
      log_job(id_, "{}; preparation output dropped", seq.error().message);
      return;
    }
  }
  pump_all();
}

void Job::vm_finished(const vm::VmOutcome& o) {
  protocol::TerminalRecord t = started_terminal();
  t.killed.reset();  // set below for a kill
  t.ran = "remote";
  using K = vm::VmOutcome::Kind;
  switch (o.kind) {
    case K::kExit:
      t.outcome.kind = protocol::Outcome::Kind::kExit;
      t.outcome.code = static_cast<int>(o.code);
      break;
    case K::kSignal:
      t.outcome.kind = protocol::Outcome::Kind::kSignal;
      t.outcome.signal = static_cast<int>(o.code);
      break;
    case K::kKilled:
      if (killed_ == std::optional<std::string>("cancel") || killed_ == std::optional<std::string>("shutdown")) {
        t.outcome.kind = protocol::Outcome::Kind::kCancelled;
      } else {
        t.outcome.kind = protocol::Outcome::Kind::kSignal;
        t.outcome.signal = SIGKILL;
      }
      t.killed = killed_;
      if (!started_confirmed_) t.ran = "none";
      break;
    case K::kRefused:
      t.outcome.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
      t.outcome.reason = "vm_start_failed";
      t.refusal_detail = o.detail.substr(0, 1024);
      t.ran = "none";
      break;
    case K::kFailed:
      // The command ran but the VM or its agent failed under it: reported like a killed job,
      // with the reason on stderr.
      vm_output(true, "\nmotor: " + o.detail + "\n");
      t.outcome.kind = protocol::Outcome::Kind::kSignal;
      t.outcome.signal = SIGKILL;
      break;
  }
  if (!started_confirmed_ && o.kind != K::kRefused && o.kind != K::kKilled) {
    t.outcome.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
    t.outcome.reason = "vm_start_failed";
    t.refusal_detail = o.detail.substr(0, 1024);
    t.ran = "none";
  }
  t.tree_hash = tree_hash_;
  t.bundle_bytes = bundle_bytes_;
  // What the command changed, from the guest's validated listing (null when it did not finish,
  // or its listing is missing or not believed: the reason is in the log).
  if (o.changes && (o.kind == K::kExit || o.kind == K::kSignal)) t.workspace = vm::encode_guest_changes(*o.changes);
  else log_job(id_, "workspace_changes: not computed ({})", o.changes_note.empty() ? "the command did not finish" : o.changes_note);
  t.seq = log_->last_seq() + 1;
  terminal_json_ = protocol::encode_terminal(t);
  deadline_.close();
  // vm_ is not destroyed inside its own callback: it goes with the job.
  conclude("finished", t.outcome);
}

}  // namespace motor::runner
