// A job whose command runs in a VM (platform "windows", issue 8). vm::VmJob does the work; this
// execution turns what it reports into the job's ordinary records: `started` once the command runs
// in the guest, `output` for each bounded chunk, the end once the VM is gone and its overlay deleted.
#include <sys/wait.h>

#include "runner/job.hpp"
#include "base/log.hpp"

namespace motor::runner {
namespace {

class VmExecution : public Execution, private vm::VmJobSink {
 public:
  VmExecution(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, vm::VmJobSpec spec, std::string job_id,
              ExecutionSink& sink)
      : job_id_(std::move(job_id)), sink_(sink) {
    vm::VmJobSink& self = *this;
    vm_ = std::make_unique<vm::VmJob>(loop, cgroups, std::move(spec), self);
  }
  void start() { vm_->start(); }

  // The VM is destroyed: nothing of it outlives the job.
  void kill(std::optional<protocol::KillReason> why) override {
    if (why && !killed_) killed_ = why;
    vm_->kill(std::string(to_wire(why.value_or(protocol::KillReason::kCancel))));
  }
  void shutdown() override {}
  // The VM and its overlay are gone before vm_finished.
  void release(std::function<void()> released) override { released(); }

 private:
  void vm_command_started() override {
    started_ = true;
    sink_.execution_started();
  }
  void vm_output(bool is_stderr, std::string_view text) override {
    if (!started_) return;
    append(is_stderr ? JobLog::Kind::kStderr : JobLog::Kind::kStdout, text, "VM output dropped");
  }
  void vm_log(const std::string& line) override { log_job(job_id_, "{}", line); }
  // The dependency preparation's output: stderr records before `started` (docs/protocol.md).
  void vm_prepare_output(std::string_view text) override {
    append(JobLog::Kind::kStderr, text, "preparation output dropped");
  }
  void vm_finished(const vm::VmOutcome& o) override;

  // Chunks are bounded (one guest-file-read each), well under a log record's limit.
  void append(JobLog::Kind kind, std::string_view text, const char* dropped) {
    for (size_t at = 0; at < text.size(); at += JobLog::kMaxPayload) {
      if (auto s = sink_.execution_output(kind, text.substr(at, JobLog::kMaxPayload)); !s) {
        log_job(job_id_, "{}; {}", s.error().message, dropped);
        return;
      }
    }
  }

  std::string job_id_;
  ExecutionSink& sink_;
  std::unique_ptr<vm::VmJob> vm_;  // not destroyed inside its own callback: it goes with the job
  bool started_ = false;
  std::optional<protocol::KillReason> killed_;
};

void VmExecution::vm_finished(const vm::VmOutcome& o) {
  ExecutionEnd end;
  using K = vm::VmOutcome::Kind;
  switch (o.kind) {
    case K::kExit:
      end.outcome.kind = protocol::Outcome::Kind::kExit;
      end.outcome.code = static_cast<int>(o.code);
      break;
    case K::kSignal:
      end.outcome.kind = protocol::Outcome::Kind::kSignal;
      end.outcome.signal = static_cast<int>(o.code);
      break;
    case K::kKilled:
      // exec-remote/v1: `cancelled` only before the command started; after, the kill's signal.
      if (!started_ && (killed_ == protocol::KillReason::kCancel || killed_ == protocol::KillReason::kShutdown)) {
        end.outcome.kind = protocol::Outcome::Kind::kCancelled;
      } else {
        end.outcome.kind = protocol::Outcome::Kind::kSignal;
        end.outcome.signal = SIGKILL;
      }
      end.killed = killed_;
      if (!started_) end.ran = protocol::Ran::kNone;
      break;
    case K::kRefused:
      end.outcome = protocol::refused(protocol::RefusalReason::kVmStartFailed);
      end.refusal_detail = o.detail.substr(0, 1024);
      end.ran = protocol::Ran::kNone;
      break;
    case K::kFailed:
      // The command ran but the VM or its agent failed under it: reported like a killed job,
      // with the reason on stderr.
      vm_output(true, "\nmotor: " + o.detail + "\n");
      end.outcome.kind = protocol::Outcome::Kind::kSignal;
      end.outcome.signal = SIGKILL;
      break;
  }
  if (!started_ && o.kind != K::kRefused && o.kind != K::kKilled) {
    end.outcome = protocol::refused(protocol::RefusalReason::kVmStartFailed);
    end.refusal_detail = o.detail.substr(0, 1024);
    end.ran = protocol::Ran::kNone;
  }
  // What the command changed, from the guest's validated listing (null when it did not finish,
  // or its listing is missing or not believed: the reason is in the log).
  if (o.changes && (o.kind == K::kExit || o.kind == K::kSignal)) end.workspace = vm::encode_guest_changes(*o.changes);
  else log_job(job_id_, "workspace_changes: not computed ({})", o.changes_note.empty() ? "the command did not finish" : o.changes_note);
  sink_.execution_ended(std::move(end));
}

}  // namespace

Status Job::start_vm(const JobLaunch& launch, vm::VmJobSpec spec, sandbox::CgroupDriver& cgroups) {
  // The disk tools' cgroup: named in state.json, so a restarted runner removes a leftover one.
  cgroup_name_ = spec.disk_cgroup;
  if (auto s = begin_running(launch); !s) return s;
  tree_hash_ = launch.tree_hash;
  bundle_bytes_ = launch.bundle_bytes;
  deadline_at_start_ = false;  // armed when the command starts in the guest (execution_started)
  log_job(id_, "starting VM {} on cpus {}: {}", spec.domain_name, cpus_.list(), summary_);
  ExecutionSink& sink = *this;
  auto vm = std::make_unique<VmExecution>(host_.loop(), cgroups, std::move(spec), id_, sink);
  VmExecution& execution = *vm;
  execution_ = std::move(vm);
  execution.start();
  return {};
}

}  // namespace motor::runner
