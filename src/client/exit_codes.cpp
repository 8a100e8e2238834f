#include "client/exit_codes.hpp"

namespace motor::client {

int exit_code_for(const protocol::Outcome& outcome, const std::optional<std::string>& killed) {
  using Kind = protocol::Outcome::Kind;
  if (killed == std::optional<std::string>("deadline")) return kExitDeadline;
  if (killed == std::optional<std::string>("cancel") || outcome.kind == Kind::kCancelled) return kExitCancelled;
  switch (outcome.kind) {
    case Kind::kExit: return outcome.code & 0xff;
    case Kind::kSignal: return 128 + (outcome.signal & 0x7f);
    case Kind::kRefusedBeforeStart:
      return protocol::is_transient_refusal(outcome.reason) ? kExitTransient : kExitUnavailable;
    case Kind::kCancelled: return kExitCancelled;
    case Kind::kOutcomeUnknown:
    case Kind::kHistoryExpired: return kExitSoftware;
  }
  return kExitSoftware;
}

}  // namespace motor::client
