// The client's side of a session: a blocking Unix socket carrying frames.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

namespace motor::client {

class Connection {
 public:
  static Expected<Connection> open(const std::string& socket_path);

  // Sends {"id":N,"method":M,"params":P}; returns N.
  Expected<int64_t> request(std::string_view method, std::string_view params_json);
  // If the runner refused the connection (and closed it) before or while this was written, the
  // error is the runner's refusal (e.g. "unauthorized" with its reason), never "Broken pipe".
  Status send_raw(std::string_view payload);
  // Reads the next message; blocks. `interrupted` is polled when a signal interrupts the wait:
  // if it returns true, read returns an "interrupted" error so the caller can act and call again.
  // An error without a request id refuses the whole connection (unauthorized, runner_full,
  // runner_draining, a broken frame): it is returned as an error with the runner's code.
  Expected<protocol::Message> read(bool (*interrupted)() = nullptr);

  int fd() const { return fd_.get(); }

 private:
  explicit Connection(UniqueFd fd) : fd_(std::move(fd)) {}
  // What the runner sent before it closed the connection, read without waiting: its refusal.
  std::optional<Error> queued_refusal();
  static std::optional<Error> as_refusal(const protocol::Message& m);
  UniqueFd fd_;
  protocol::FrameDecoder decoder_;
  std::deque<std::string> frames_;
  simdjson::dom::parser parser_;
  int64_t next_id_ = 1;
};

}  // namespace motor::client
