// The protocol's enumerated values (docs/protocol.md), as the runner's code uses them. Each is
// parsed from its wire string once, where a request is decoded, and written back as that string
// only when a record is encoded: no code past the protocol edge compares wire strings.
#pragma once

#include <optional>
#include <string_view>

namespace motor::protocol {

enum class Network { kOffline, kOutbound };
enum class Platform { kLinux, kWindows };
enum class Priority { kBatch, kInteractive };
// Whether the command ran ("remote") or not at all ("none").
enum class Ran { kRemote, kNone };
// Why the runner killed a job's processes (the terminal record's `killed`).
enum class KillReason { kDeadline, kCancel, kShutdown };
// refused_before_start reasons the runner gives (docs/protocol.md "Refusals").
enum class RefusalReason {
  kRunnerFull,
  kRunnerDraining,
  kRunnerDiskFull,
  kQueueWaitExceeded,
  kWorkspaceSetupFailed,
  kWorkspaceKeyRejected,
  kPlatformUnsupported,
  kNetworkUnsupported,
  kScreenRefused,
  kVmStartFailed,
  // workspace.prepare's own (docs/protocol.md "Workspaces")
  kSnapshotFailed,
  kTransferInterrupted,
  kTreeHashMismatch,
  kBundleRejected,
};

// An error reply's `code` (docs/protocol.md "Errors"); a client parses it once, where the reply
// is decoded (Message::error). Codes this version does not know are kOther (the text is kept).
enum class ErrorCode {
  kBadRequest,
  kUnauthorized,
  kInternal,
  kStalled,         // the runner dropped a follower that read nothing: reattach from its seq
  kSessionTimeout,
  kRunnerDiskFull,
  kOther,
};

std::string_view to_wire(Network v);
std::string_view to_wire(Platform v);
std::string_view to_wire(Priority v);
std::string_view to_wire(Ran v);
std::string_view to_wire(KillReason v);
std::string_view to_wire(RefusalReason v);
std::string_view to_wire(ErrorCode v);

std::optional<Network> parse_network(std::string_view s);
std::optional<Platform> parse_platform(std::string_view s);
std::optional<Priority> parse_priority(std::string_view s);
std::optional<KillReason> parse_kill_reason(std::string_view s);
// A refusal reason from a record (one this version does not know: none; keep the text).
std::optional<RefusalReason> parse_refusal_reason(std::string_view s);
ErrorCode parse_error_code(std::string_view s);

}  // namespace motor::protocol
