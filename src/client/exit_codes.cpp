#include "client/exit_codes.hpp"

#include "client/ssh_session.hpp"

namespace motor::client {

int exit_code_for(const protocol::Outcome& outcome, const std::optional<std::string>& killed,
                  std::optional<int64_t> retry_after_ms) {
  using Kind = protocol::Outcome::Kind;
  using protocol::KillReason;
  // An unknown `killed` value (another runner's) says only that it was killed: the outcome decides.
  const std::optional<KillReason> kill = killed ? protocol::parse_kill_reason(*killed) : std::nullopt;
  if (kill == KillReason::kDeadline) return kExitDeadline;
  // Stopped by the runner's own shutdown, not by anyone's cancel: not 130, which is Ctrl-C's.
  if (kill == KillReason::kShutdown) return kExitDropped;
  if (kill == KillReason::kCancel || outcome.kind == Kind::kCancelled) return kExitCancelled;
  switch (outcome.kind) {
    case Kind::kExit: return outcome.code & 0xff;
    case Kind::kSignal: return 128 + (outcome.signal & 0x7f);
    // The runner's hint decides, whatever the reason (one this client does not know too): with
    // retry_after_ms it says "try again later"; without it the refusal is lasting.
    case Kind::kRefusedBeforeStart: return retry_after_ms ? kExitTransient : kExitUnavailable;
    case Kind::kCancelled: return kExitCancelled;
    // Also every outcome this client does not know: it may have run (exec-remote/v1).
    case Kind::kOutcomeUnknown: return kExitDropped;
    case Kind::kHistoryExpired: return kExitSoftware;
  }
  return kExitSoftware;
}

int exit_code_for_error(std::string_view code) {
  if (code == "unauthorized" || code == kAuthRefused || code == kNotBridged) return kExitNoPermission;
  if (code == kRunnerTooOld || code == "unavailable") return kExitUnavailable;
  if (code == kHostUnreachable || code == kRunnerDown) return kExitTransient;
  if (code == "bad_request" || code == "usage") return kExitUsage;
  // A full or draining runner refuses for now, as an unreachable one does: try again later.
  if (code == "unreachable" || code == "cache_busy" || protocol::is_transient_refusal(code)) return kExitTransient;
  return kExitSoftware;
}

}  // namespace motor::client
