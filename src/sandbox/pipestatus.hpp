// The runner's side of a shell job's `pipestatus` (exec-remote/v1, issue 17): what motor-init,
// told by the job's shell, left in its name when it exited (sandbox/init/init_report.hpp says the
// whole path and why the job cannot use it to confuse the runner).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace motor::sandbox {

// The statuses motor-init reported, read from the exited, not yet reaped `init_pid` (before the
// reap frees the pid); none if its name is not a report.
std::optional<std::vector<int>> init_reported_pipestatus(pid_t init_pid);

// The same from /proc/PID/comm's contents.
std::optional<std::vector<int>> pipestatus_from_init_name(const std::string& comm);

// Whether `statuses` are sent as `pipestatus` for a command that exited with `exit_code`: a
// pipeline (two or more) that the exit code does not contradict (init_report::reportable).
bool pipestatus_reportable(const std::vector<int>& statuses, int exit_code);

// `command` as bash runs it with the trap that reports its last pipeline to motor-init
// (`motor-init --pipestatus`).
std::string command_reporting_pipestatus(const std::string& command);

}  // namespace motor::sandbox
