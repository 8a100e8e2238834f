// The runner's log: structured entries to journald when the runner runs under systemd
// (JOURNAL_STREAM is set), otherwise one line per entry on stderr.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace motor {

enum class LogLevel { kError = 3, kWarning = 4, kInfo = 6, kDebug = 7 };

void log_init();
void log_message(LogLevel level, std::string_view job_id, std::string_view message);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::kInfo, {}, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warning(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::kWarning, {}, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::kError, {}, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_job(std::string_view job_id, fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::kInfo, job_id, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace motor
