#include "client/exit_codes.hpp"

#include "client/ssh_session.hpp"

namespace motor::client {

int exit_code_for(const protocol::Outcome& outcome, const std::optional<std::string>& killed) {
  using Kind = protocol::Outcome::Kind;
  if (killed == std::optional<std::string>("deadline")) return kExitDeadline;
  // Stopped by the runner's own shutdown, not by anyone's cancel: not 130, which is Ctrl-C's.
  if (killed == std::optional<std::string>("shutdown")) return kExitDropped;
  if (killed == std::optional<std::string>("cancel") || outcome.kind == Kind::kCancelled) return kExitCancelled;
  switch (outcome.kind) {
    case Kind::kExit: return outcome.code & 0xff;
    case Kind::kSignal: return 128 + (outcome.signal & 0x7f);
    case Kind::kRefusedBeforeStart:
      return protocol::is_transient_refusal(outcome.reason) ? kExitTransient : kExitUnavailable;
    case Kind::kCancelled: return kExitCancelled;
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
  if (code == "unreachable" || protocol::is_transient_refusal(code)) return kExitTransient;
  return kExitSoftware;
}

}  // namespace motor::client
