#include "protocol/wire_enums.hpp"

namespace motor::protocol {

std::string_view to_wire(Network v) { return v == Network::kOutbound ? "outbound" : "offline"; }
std::string_view to_wire(Platform v) { return v == Platform::kWindows ? "windows" : "linux"; }
std::string_view to_wire(Priority v) { return v == Priority::kInteractive ? "interactive" : "batch"; }
std::string_view to_wire(Ran v) { return v == Ran::kNone ? "none" : "remote"; }

std::string_view to_wire(KillReason v) {
  switch (v) {
    case KillReason::kDeadline: return "deadline";
    case KillReason::kCancel: return "cancel";
    case KillReason::kShutdown: return "shutdown";
  }
  return "cancel";
}

std::string_view to_wire(RefusalReason v) {
  switch (v) {
    case RefusalReason::kRunnerFull: return "runner_full";
    case RefusalReason::kRunnerDraining: return "runner_draining";
    case RefusalReason::kRunnerDiskFull: return "runner_disk_full";
    case RefusalReason::kQueueWaitExceeded: return "queue_wait_exceeded";
    case RefusalReason::kWorkspaceSetupFailed: return "workspace_setup_failed";
    case RefusalReason::kWorkspaceKeyRejected: return "workspace_key_rejected";
    case RefusalReason::kPlatformUnsupported: return "platform_unsupported";
    case RefusalReason::kNetworkUnsupported: return "network_unsupported";
    case RefusalReason::kScreenRefused: return "screen_refused";
    case RefusalReason::kVmStartFailed: return "vm_start_failed";
    case RefusalReason::kSnapshotFailed: return "snapshot_failed";
    case RefusalReason::kTransferInterrupted: return "transfer_interrupted";
    case RefusalReason::kTreeHashMismatch: return "tree_hash_mismatch";
    case RefusalReason::kBundleRejected: return "bundle_rejected";
  }
  return "workspace_setup_failed";
}

std::string_view to_wire(ErrorCode v) {
  switch (v) {
    case ErrorCode::kBadRequest: return "bad_request";
    case ErrorCode::kUnauthorized: return "unauthorized";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kStalled: return "stalled";
    case ErrorCode::kSessionTimeout: return "session_timeout";
    case ErrorCode::kRunnerDiskFull: return "runner_disk_full";
    case ErrorCode::kOther: break;
  }
  return "internal";
}

std::optional<RefusalReason> parse_refusal_reason(std::string_view s) {
  for (int i = 0; i <= static_cast<int>(RefusalReason::kBundleRejected); ++i) {
    if (to_wire(static_cast<RefusalReason>(i)) == s) return static_cast<RefusalReason>(i);
  }
  return std::nullopt;
}

ErrorCode parse_error_code(std::string_view s) {
  for (int i = 0; i < static_cast<int>(ErrorCode::kOther); ++i) {
    if (to_wire(static_cast<ErrorCode>(i)) == s) return static_cast<ErrorCode>(i);
  }
  return ErrorCode::kOther;
}

std::optional<Network> parse_network(std::string_view s) {
  if (s == "offline") return Network::kOffline;
  if (s == "outbound") return Network::kOutbound;
  return std::nullopt;
}

std::optional<Platform> parse_platform(std::string_view s) {
  if (s == "linux") return Platform::kLinux;
  if (s == "windows") return Platform::kWindows;
  return std::nullopt;
}

std::optional<Priority> parse_priority(std::string_view s) {
  if (s == "batch") return Priority::kBatch;
  if (s == "interactive") return Priority::kInteractive;
  return std::nullopt;
}

std::optional<KillReason> parse_kill_reason(std::string_view s) {
  if (s == "deadline") return KillReason::kDeadline;
  if (s == "cancel") return KillReason::kCancel;
  if (s == "shutdown") return KillReason::kShutdown;
  return std::nullopt;
}

}  // namespace motor::protocol
