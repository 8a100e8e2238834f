#include "base/log.hpp"

#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "motor/printable.hpp"

namespace motor {
namespace {
bool g_journal = false;
LogLevel g_level = LogLevel::kInfo;

// systemd sets JOURNAL_STREAM=DEV:INODE for the stream it connected; an inherited value that
// does not match stderr (a shell started from a unit, a redirected stderr) would send every
// line to a journal nobody reads for this process, so it counts only when it matches.
bool stderr_is_journal_stream() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  char tail = 0;
  if (std::sscanf(env, "%llu:%llu%c", &dev, &ino, &tail) != 2) return false;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

void to_journal(LogLevel level, const std::vector<LogField>& fields, const std::string& message) {
  std::vector<std::string> lines;
  lines.reserve(fields.size() + 3);
  lines.push_back("MESSAGE=" + message);
  lines.push_back("PRIORITY=" + std::to_string(static_cast<int>(level)));
  lines.emplace_back("SYSLOG_IDENTIFIER=motor-runner");
  for (const LogField& f : fields) {
    if (!f.value.empty()) lines.push_back(std::string(f.name) + "=" + std::string(f.value));
  }
  std::vector<iovec> iov;
  iov.reserve(lines.size());
  for (auto& l : lines) iov.push_back({l.data(), l.size()});
  sd_journal_sendv(iov.data(), static_cast<int>(iov.size()));
}

void to_stderr(LogLevel level, const std::vector<LogField>& fields, const std::string& message) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm parts{};
  gmtime_r(&ts.tv_sec, &parts);
  std::string line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z motor-runner {}: ", parts.tm_year + 1900,
                                 parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                                 ts.tv_nsec / 1000000, log_level_name(level));
  std::string extra;
  for (const LogField& f : fields) {
    if (f.value.empty()) continue;
    if (f.name == "MOTOR_JOB_ID") line += fmt::format("job {}: ", f.value);
    else extra += fmt::format(" {}={}", f.name, f.value);
  }
  line += message + extra + '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}
}  // namespace

void log_init() { g_journal = stderr_is_journal_stream(); }
void log_set_level(LogLevel level) { g_level = level; }
bool log_goes_to_journal() { return g_journal; }

void log_entry(LogLevel level, std::initializer_list<LogField> fields, std::string_view raw_message) {
  if (static_cast<int>(level) > static_cast<int>(g_level)) return;
  // Messages and fields carry callers' text (command lines, keys, paths): escaped, so no caller
  // writes escape sequences into an operator's terminal or a second line into the log.
  const std::string message = escape_control_chars(raw_message);
  std::vector<std::string> values;
  values.reserve(fields.size());
  for (const LogField& f : fields) values.push_back(escape_control_chars(f.value));
  std::vector<LogField> escaped;
  escaped.reserve(fields.size());
  std::size_t i = 0;
  for (const LogField& f : fields) escaped.push_back({f.name, values[i++]});
  if (g_journal) to_journal(level, escaped, message);
  else to_stderr(level, escaped, message);
}

void log_message(LogLevel level, std::string_view job_id, std::string_view message) {
  log_entry(level, {{"MOTOR_JOB_ID", job_id}}, message);
}

}  // namespace motor
