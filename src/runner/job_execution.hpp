// How a job's command runs. A Job owns one Execution from its start: LinuxExecution (the job
// sandbox under a cgroup, job_linux.cpp), VmExecution (a fresh VM, job_vm.cpp), SystemdExecution
// (the same sandbox in a transient systemd unit, job_systemd.cpp). The execution reports to the job through ExecutionSink; the job keeps the record,
// the deadline, the workspace report and the terminal record's common fields.
#pragma once

#include <sys/wait.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/messages.hpp"
#include "runner/job_log.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/spawn.hpp"

namespace motor::runner {

// The command a Linux job runs in its sandbox (motor-init and its arguments), as the direct and
// the systemd backend both spawn it.
struct JobCommand {
  std::string executable;
  std::vector<std::string> argv, env;  // argv[0] included; env "NAME=value"
  std::string cwd;                     // inside the sandbox
  const sandbox::Account* account = nullptr;  // the job account

  // The spawn request without its fds and cgroup (the backend adds those).
  sandbox::SpawnSpec spawn_spec() const {
    sandbox::SpawnSpec spec;
    spec.executable = executable;
    spec.argv = argv;
    spec.env = env;
    spec.cwd = cwd;
    spec.uid = account->uid;
    spec.gid = account->gid;
    return spec;
  }
};

// How the command ended, as far as the execution knows.
struct ExecutionEnd {
  protocol::Outcome outcome;
  protocol::Ran ran = protocol::Ran::kRemote;
  std::optional<protocol::KillReason> killed;  // the runner's kill that ended it
  std::optional<std::string> refusal_detail;
  std::optional<std::vector<int>> pipestatus;  // a shell pipeline's statuses, when its shell reported them
  bool oom_killed = false;
  // The command ran on the host's workspace: it is scanned for what it changed before the
  // terminal record. An execution that knows the changes itself (a VM's guest) gives `workspace`.
  bool scan_workspace = false;
  std::optional<protocol::WorkspaceReportJson> workspace;
  // (ext) resource_usage: CPU and peak memory from the job's cgroup, where the execution has one.
  std::optional<int64_t> cpu_user_us, cpu_system_us, memory_peak_bytes;
};

// A Linux job's end from its sandboxed child: refused before start when the sandbox could not be
// set up (`setup_error`, not an exec failure: that one is the command's, exit 127), else its exit
// code or the signal that ended it (`killed` says why, when the runner sent it). A job that ran
// gets its workspace scanned; one that never ran changed nothing.
inline void set_sandboxed_outcome(ExecutionEnd& end, const std::string& setup_error, int wait_status) {
  end.scan_workspace = setup_error.empty();
  if (!setup_error.empty() && setup_error.rfind("exec:", 0) != 0) {
    end.outcome = protocol::refused(protocol::RefusalReason::kWorkspaceSetupFailed);
    end.refusal_detail = setup_error.substr(0, 1024);
    end.ran = protocol::Ran::kNone;
    end.killed.reset();
  } else if (WIFEXITED(wait_status)) {
    end.outcome.kind = protocol::Outcome::Kind::kExit;
    end.outcome.code = WEXITSTATUS(wait_status);
  } else {
    end.outcome.kind = protocol::Outcome::Kind::kSignal;
    end.outcome.signal = WTERMSIG(wait_status);
  }
}

class ExecutionSink {
 public:
  virtual ~ExecutionSink() = default;
  // The command runs (exec'd in the sandbox, started in the guest): the `started` record.
  virtual void execution_started() = 0;
  // Before execution_started, where a starter stamped them (sandbox::SpawnTimes, 0: unknown): when
  // it read the request, planned the sandbox, its child's steps, the clone's return. Only for the
  // start steps' log line.
  virtual void execution_spawn_steps(const sandbox::SpawnTimes& /*times*/) {}
  // The command's main process is gone (what it left may still be dying): the deadline stops.
  virtual void execution_exited() = 0;
  // Output (or the preparation's, as stderr): an error if the log cannot take it now (a full disk).
  virtual Status execution_output(JobLog::Kind kind, std::string_view bytes) = 0;
  // It never started (the starter failed): the job ends as refused.
  virtual void execution_start_failed(const std::string& detail) = 0;
  // Everything of the job is gone.
  virtual void execution_ended(ExecutionEnd end) = 0;
};

class Execution {
 public:
  virtual ~Execution() = default;
  // Kills everything of the job (its process tree, its VM); the end is reported as usual.
  // `why` unset: a kill the job did not earn (processes left after its command ended).
  virtual void kill(std::optional<protocol::KillReason> why) = 0;
  // The runner is stopping: output the log cannot take is dropped, so the job can end.
  virtual void shutdown() = 0;
  // After the end (and the workspace scan), before the terminal record: what is left of the job
  // on the host goes (its cgroup), so a client that saw `terminal` finds nothing of it.
  // `released` runs once that is done: within the call, or later on the loop (not at all if the
  // execution is destroyed first). It may destroy the execution.
  virtual void release(std::function<void()> released) = 0;
  // The job is on record: its command may run. A Linux job's sandbox is built while its record
  // is saved, and its command waits at a gate until this (motor-init --gate; the systemd unit's
  // "go"). An execution that starts only after the record (a VM) has nothing to open.
  virtual void command_may_run() {}
};

}  // namespace motor::runner
