// One blocking connection from motor-bb-runner to motor-runner's socket (docs/protocol.md).
// Blocking is right here: each gRPC call has a thread of its own in this process, and the
// runner's loop never waits on us. Every wait is bounded by poll() so a caller can check for
// cancellation between reads.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/frame.hpp"

namespace motor::bbrunner {

class RunnerLink {
 public:
  static Expected<RunnerLink> connect(const std::string& socket_path);

  // One request frame; the id is the caller's.
  Status send(std::string_view request_json);
  // The next frame's payload. nullopt: nothing arrived within `wait` (try again); an error: the
  // runner closed the connection or sent a broken frame.
  Expected<std::optional<std::string>> next(std::chrono::milliseconds wait);

 private:
  explicit RunnerLink(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
  protocol::FrameDecoder decoder_;
  std::vector<std::string> ready_;
  size_t ready_pos_ = 0;
};

// One request and its reply (a result or an error), for the short calls (runner.status).
Expected<std::string> call(const std::string& socket_path, std::string_view request_json, std::chrono::milliseconds wait);

}  // namespace motor::bbrunner
