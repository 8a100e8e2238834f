// The runner's log: structured entries to the journal when stderr is the journal stream systemd
// gave this process (JOURNAL_STREAM names stderr's device and inode), otherwise one line per
// entry on stderr. Entries below the level set by log_set_level (the config's log_level) are
// dropped.
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "base/log_level.hpp"

namespace motor {

// A journal field besides MESSAGE and PRIORITY: an upper-case name (MOTOR_JOB_ID, MOTOR_CALLER,
// MOTOR_OUTCOME, ...) and its value. On stderr the fields follow the message as NAME=value.
struct LogField {
  std::string_view name;
  std::string_view value;
};

// Decides journal or stderr once (at start); safe to call again.
void log_init();
void log_set_level(LogLevel level);
bool log_goes_to_journal();
void log_message(LogLevel level, std::string_view job_id, std::string_view message);
void log_entry(LogLevel level, std::initializer_list<LogField> fields, std::string_view message);

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
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::kDebug, {}, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_job(std::string_view job_id, fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::kInfo, job_id, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace motor
