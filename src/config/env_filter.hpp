// Which of the caller's environment variables reach a job. Pure: no kernel, no loop.
//
// Only build variables cross: names matching RUST_*, CARGO_*, NEXTEST_*, LC_*, or exactly
// RUSTFLAGS or RUSTDOCFLAGS, plus whatever the config's allow list names (exact names, or a
// prefix when the entry ends in '*'). Whatever the list says, a name containing (in any case)
// TOKEN, SECRET, PASSWORD, KEY or CREDENTIAL is dropped, SSH_AUTH_SOCK never crosses, and
// PATH, HOME, USER and LOGNAME are the runner's to set (base_job_env). Invalid names (empty,
// containing '=' or NUL, longer than 256 bytes) and values containing NUL are dropped too.
// Everything dropped is named in `not_forwarded` (names only, never a value).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace motor::config {

// Longest environment variable name accepted from a caller, in bytes.
inline constexpr std::size_t kMaxEnvNameBytes = 256;

struct EnvFilterResult {
  // What reaches the job, sorted by name, one entry per name (a repeated name: the last value;
  // a name also asked for with an invalid value is not forwarded at all).
  std::vector<std::pair<std::string, std::string>> forwarded;
  // Names that were asked for and do not reach the job: sorted, deduplicated, never a value.
  // An invalid name is shown cut before its first '=' or NUL and at most 256 bytes, with "..."
  // appended when something was cut; an empty name is shown as "(empty name)".
  std::vector<std::string> not_forwarded;
};

EnvFilterResult filter_env(const std::vector<std::pair<std::string, std::string>>& requested,
                           const std::vector<std::string>& allow_list);

// Why `name` can never be forwarded whatever the allow list says ("contains TOKEN",
// "SSH_AUTH_SOCK never crosses", "set by the runner", "invalid name"), or "" when it could be.
// The config uses this to refuse allow-list entries that could never take effect.
std::string never_forwarded_reason(std::string_view name);

// The environment every job starts from, as NAME=VALUE strings:
// PATH=/usr/local/bin:/usr/bin:/bin, HOME, USER, LOGNAME and LANG=C.UTF-8.
std::vector<std::string> base_job_env(const std::string& home, const std::string& user);

// base_job_env plus the forwarded variables, as NAME=VALUE strings sorted by name. A forwarded
// variable replaces a base one (LANG) except PATH, HOME, USER and LOGNAME, which always keep
// the runner's values.
std::vector<std::string> job_env(const std::string& home, const std::string& user,
                                 const std::vector<std::pair<std::string, std::string>>& forwarded);

}  // namespace motor::config
