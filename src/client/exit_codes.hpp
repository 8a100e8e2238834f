// How `motor run` turns a job's terminal record into its own exit status (docs/protocol.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "protocol/messages.hpp"

namespace motor::client {

inline constexpr int kExitUsage = 64;        // EX_USAGE: bad command line
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: runner unreachable, or a permanent refusal
inline constexpr int kExitSoftware = 70;     // outcome unknown, history expired, a protocol error
inline constexpr int kExitTransient = 75;    // EX_TEMPFAIL: a transient refusal; try again later
inline constexpr int kExitNoPermission = 77; // EX_NOPERM: unauthorized
inline constexpr int kExitDropped = 71;      // the runner stopped or restarted under the job
inline constexpr int kExitDeadline = 124;    // like timeout(1)
inline constexpr int kExitCancelled = 130;   // like a shell's Ctrl-C

// A refusal is transient (75) when it carries `retry_after_ms`, lasting (69) when it does not.
int exit_code_for(const protocol::Outcome& outcome, const std::optional<std::string>& killed,
                  std::optional<int64_t> retry_after_ms);
// The exit status for an error (an error reply, a refused connection, a lost runner) by its code.
int exit_code_for_error(std::string_view code);

}  // namespace motor::client
