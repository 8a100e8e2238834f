// The config file's lexical layer and value checks, shared by the key table (config_keys*.cpp),
// the parser (config.cpp) and the generators (config_docs.cpp). Each check returns the error
// message without origin, line or key (the parser adds those), or nullopt.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace motor::config::config_detail {

constexpr std::size_t kMaxConfigBytes = 1 << 20;
constexpr std::size_t kMaxSocketPathBytes = 107;  // sizeof(sockaddr_un::sun_path) - 1
constexpr std::string_view kSeconds = "a whole number of seconds";
constexpr std::string_view kWhole = "a whole number";
constexpr int64_t kYear = 365 * 24 * 3600;

// One value lexed from the right-hand side of a line: a scalar, or the items of a list.
struct Value {
  std::string scalar;
  std::vector<std::string> items;
};

// A value as it appears in an error message: quoted, control characters escaped, long ones cut.
std::string shown(std::string_view value);
std::string_view trim(std::string_view s);
std::optional<std::string> lex_scalar(std::string_view raw, Value& value);
std::optional<std::string> lex_list(std::string_view raw, Value& value);

std::optional<std::string> to_whole(std::string_view text, std::string_view what, int64_t min,
                                    int64_t max, int64_t& out);
std::optional<std::string> to_size(std::string_view text, int64_t min, int64_t max, int64_t& out);
// The one boolean syntax of the config: `true` or `false`.
std::optional<std::string> to_bool(std::string_view text, bool& out);
// Account and group names as useradd/groupadd accept them.
std::optional<std::string> check_account_name(std::string_view name, std::string_view what);
std::optional<std::string> check_absolute_dir(std::string& path, bool allow_empty);
// An absolute path or "" (feature off).
std::optional<std::string> set_optional_absolute(const std::string& value, std::string& out);

// Values written back as config text that parses to the same value (the defaults' text, reload).
std::string size_name(int64_t bytes);
std::string show_scalar(const std::string& value);
std::string show_list(const std::vector<std::string>& items);
std::string show_uids(const std::vector<uid_t>& uids);

}  // namespace motor::config::config_detail
