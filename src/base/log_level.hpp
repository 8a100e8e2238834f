// Log severities (syslog's numbers, as the journal's PRIORITY takes them) and their config names.
#pragma once

#include <optional>
#include <string_view>

namespace motor {

enum class LogLevel { kError = 3, kWarning = 4, kInfo = 6, kDebug = 7 };

inline const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "info";
}

inline std::optional<LogLevel> parse_log_level(std::string_view name) {
  for (LogLevel l : {LogLevel::kError, LogLevel::kWarning, LogLevel::kInfo, LogLevel::kDebug}) {
    if (name == log_level_name(l)) return l;
  }
  return std::nullopt;
}

}  // namespace motor
