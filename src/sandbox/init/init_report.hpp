// What a shell job tells motor-init about its last pipeline, and what motor-init tells the runner
// (exec-remote/v1 `pipestatus`, issue 17). Shared by motor-init (static, no exceptions) and the
// runner, so it is header-only and allocates nothing.
//
// 1. The job's shell (bash, run by the runner as `bash -c TRAP\nCOMMAND`) writes, from an EXIT
//    trap, its last pipeline's statuses as one line "0 1\n" to fd kPipestatusFd, a pipe whose
//    read end only motor-init holds. The job can write there too: what it writes is the job's
//    own claim about its own pipeline, read bounded (kMaxShellReport bytes), and anything but one
//    such line of integers 0..255 is no report.
// 2. motor-init, when the shell exits normally, names itself "|0|1" (PR_SET_NAME, at most 15
//    bytes: a report that does not fit is dropped), as it names itself "motor-init:sN" for a
//    signal. Only the process itself can set its name, and motor-init is not dumpable, so the
//    job cannot reach the runner through this step.
// 3. The runner reads that name from the exited, not yet reaped init, and reports `pipestatus`
//    only for a pipeline (two statuses or more) whose statuses agree with the exit code (the last
//    status, or under pipefail the rightmost non-zero one): a stale or forged report never
//    contradicts the outcome.
#pragma once

#include <cstddef>
#include <string_view>

namespace motor::sandbox::init_report {

// The fd the shell's trap writes to: high, so a job's own `exec 3>file` does not meet it (bash
// saves its own redirections from fd 10 up); the trap also checks it is still a pipe.
inline constexpr int kPipestatusFd = 254;
inline constexpr std::size_t kMaxShellReport = 256;  // bytes motor-init reads at most
inline constexpr std::size_t kMaxName = 15;          // TASK_COMM_LEN - 1
inline constexpr int kMaxStatuses = 8;               // "|0|0|0|0|0|0|0" fits 7; more cannot

// Prepended to a `command` run by bash: the statuses of the last pipeline, on the pipe, at exit.
// Captured first (any command resets PIPESTATUS); errors (a closed fd) stay off the job's stderr;
// the trap does not change the shell's exit status.
inline constexpr const char* kBashExitTrap =
    "trap '__motor_pipestatus=\"${PIPESTATUS[*]}\"; { [ -p /dev/fd/254 ] && "
    "printf \"%s\\n\" \"$__motor_pipestatus\" >&254; } 2>/dev/null' EXIT\n";

struct Statuses {
  int count = 0;
  int value[kMaxStatuses] = {};
};

// One status: decimal 0..255, no sign, no leading zeros beyond "0".
inline bool parse_status(std::string_view s, int& out) {
  if (s.empty() || s.size() > 3 || (s.size() > 1 && s[0] == '0')) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > 255) return false;
  out = v;
  return true;
}

// Statuses separated by `sep`, nothing else; false on anything else (empty, too many, garbage).
inline bool parse_list(std::string_view s, char sep, Statuses& out) {
  out = {};
  while (true) {
    const std::size_t end = s.find(sep);
    if (out.count == kMaxStatuses || !parse_status(s.substr(0, end), out.value[out.count])) return false;
    ++out.count;
    if (end == std::string_view::npos) return true;
    s.remove_prefix(end + 1);
  }
}

// What the shell wrote: exactly one line "N N ...\n".
inline bool parse_shell_report(std::string_view report, Statuses& out) {
  if (report.size() < 2 || report.size() > kMaxShellReport || report.back() != '\n') return false;
  report.remove_suffix(1);
  return report.find('\n') == std::string_view::npos && parse_list(report, ' ', out);
}

// motor-init's name for it ("|0|1"), into `name` (kMaxName + 1 bytes); false if it does not fit.
inline bool format_name(const Statuses& s, char* name) {
  std::size_t n = 0;
  for (int i = 0; i < s.count; ++i) {
    char digits[4];
    int len = 0;
    int v = s.value[i];
    do {
      digits[len++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v > 0);
    if (n + 1 + static_cast<std::size_t>(len) > kMaxName) return false;
    name[n++] = '|';
    while (len > 0) name[n++] = digits[--len];
  }
  name[n] = '\0';
  return s.count > 0;
}

// The name as /proc/PID/comm shows it ("|0|1\n"); false if it is not a report.
inline bool parse_name(std::string_view comm, Statuses& out) {
  if (!comm.empty() && comm.back() == '\n') comm.remove_suffix(1);
  if (comm.size() < 2 || comm.size() > kMaxName || comm[0] != '|') return false;
  return parse_list(comm.substr(1), '|', out);
}

// Whether the runner reports these statuses for a command that exited with `code`: a pipeline
// (two or more), whose last status is the code, or (pipefail) whose rightmost non-zero one is.
inline bool reportable(const Statuses& s, int code) {
  if (s.count < 2) return false;
  if (s.value[s.count - 1] == code) return true;
  for (int i = s.count - 1; i >= 0; --i) {
    if (s.value[i] != 0) return s.value[i] == code;
  }
  return false;
}

}  // namespace motor::sandbox::init_report
