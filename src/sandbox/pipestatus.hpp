// The runner's side of what motor-init reports in its name: the signal that killed the command,
// and a shell job's `pipestatus` (exec-remote/v1, issue 17): what motor-init,
// told by the job's shell, left in its name when it exited (sandbox/init/init_report.hpp says the
// whole path and why the job cannot use it to confuse the runner).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace motor::sandbox {

// What motor-init, PID 1 of a job, left in its name as it exited. It cannot die of the signal
// that killed its command: it exits 128+N and names itself "motor-init:sN" just before. Or the
// job's shell told it its last pipeline's statuses ("|0|1").
struct InitReport {
  int signal = 0;  // N, or 0 when its name says no signal
  std::optional<std::vector<int>> pipestatus;  // none if its name is not a pipestatus report
};

// Read once from /proc/PID/comm of the exited, not yet reaped `init_pid` (before the reap frees
// the pid).
InitReport read_init_report(pid_t init_pid);

// The two readings of /proc/PID/comm's contents.
int init_signal_from_name(const std::string& comm);
std::optional<std::vector<int>> pipestatus_from_init_name(const std::string& comm);

// Whether `statuses` are sent as `pipestatus` for a command that exited with `exit_code`: a
// pipeline (two or more) that the exit code does not contradict (init_report::reportable).
bool pipestatus_reportable(const std::vector<int>& statuses, int exit_code);

// `command` as bash runs it with the trap that reports its last pipeline to motor-init
// (`motor-init --pipestatus`).
std::string command_reporting_pipestatus(const std::string& command);

}  // namespace motor::sandbox
