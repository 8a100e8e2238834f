// What `motor exec-remote` writes to its caller: frames (4-byte length, one JSON object) in the
// exec-remote/v1 shapes, with the caller's own request ids. The runner's replies and records are
// passed on as they are, only their "id" replaced; what the endpoint answers itself (a refusal
// before the job reached the runner, an unreachable runner's status) it encodes canonically
// (RFC 8785: keys in order, no spaces), as the vocabulary's golden vectors are.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::client {

// The caller's end: frames from any thread, whole and in order.
class CallerOutput {
 public:
  explicit CallerOutput(int fd) : fd_(fd) {}
  // False once the caller has gone (its end is closed); nothing is written after that.
  bool send(std::string_view payload);
  bool gone() const { return gone_; }

 private:
  std::mutex mu_;
  int fd_;
  std::atomic<bool> gone_{false};
};

// `frame` (a JSON object from the runner) with its "id" replaced by `caller_id`; keys keep
// their order, values are unchanged.
Expected<std::string> with_caller_id(std::string_view frame, int64_t caller_id);

// A refusal the endpoint makes before the runner has the job (the checkout could not be
// snapshotted, the runner could not be reached or refused the sync): a terminal record with a
// job id of the endpoint's own, ran "none".
struct LocalRefusal {
  std::string reason;                  // a refusal reason's wire name
  std::string detail;                  // quoted to the caller verbatim (at most 1,024 bytes kept)
  std::optional<int64_t> retry_after_ms;
  int64_t bundle_bytes = 0;
  std::optional<std::string> tree_hash;
};
std::string refusal_terminal(int64_t caller_id, const std::string& job_id, const LocalRefusal& r);
// The same refusal as a workspace.prepare reply.
std::string refusal_prepare_reply(int64_t caller_id, const std::string& transfer_id, const LocalRefusal& r);
// exec.status when the runner cannot be reached: empty, server_reachable false.
std::string unreachable_status_reply(int64_t caller_id);

}  // namespace motor::client
