#include "base/log.hpp"

#include <systemd/sd-journal.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>

#include "motor/printable.hpp"

namespace motor {
namespace {
bool g_journal = false;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "info";
}
}  // namespace

void log_init() { g_journal = std::getenv("JOURNAL_STREAM") != nullptr; }

void log_message(LogLevel level, std::string_view job_id, std::string_view raw_message) {
  // Messages carry callers' text (command lines, keys, paths): escaped, so no caller writes
  // escape sequences into the terminal of an operator reading the log. One line per message.
  const std::string message = escape_control_chars(raw_message);
  if (g_journal) {
    const std::string& msg = message;
    if (job_id.empty()) {
      sd_journal_send("MESSAGE=%s", msg.c_str(), "PRIORITY=%d", static_cast<int>(level), "SYSLOG_IDENTIFIER=motor-runner",
                      nullptr);
    } else {
      const std::string id(job_id);
      sd_journal_send("MESSAGE=%s", msg.c_str(), "PRIORITY=%d", static_cast<int>(level), "SYSLOG_IDENTIFIER=motor-runner",
                      "MOTOR_JOB_ID=%s", id.c_str(), nullptr);
    }
    return;
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm parts{};
  gmtime_r(&ts.tv_sec, &parts);
  std::string line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z motor-runner {}: ", parts.tm_year + 1900,
                                 parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                                 ts.tv_nsec / 1000000, level_name(level));
  if (!job_id.empty()) line += fmt::format("job {}: ", job_id);
  line.append(message);
  line.push_back('\n');
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace motor
