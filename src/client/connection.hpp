// The client's side of a session: a blocking Unix socket carrying frames.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <deque>
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
  Status send_raw(std::string_view payload);
  // Reads the next message; blocks. `interrupted` is polled when a signal interrupts the wait:
  // if it returns true, read returns an "interrupted" error so the caller can act and call again.
  Expected<protocol::Message> read(bool (*interrupted)() = nullptr);

  int fd() const { return fd_.get(); }

 private:
  explicit Connection(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
  protocol::FrameDecoder decoder_;
  std::deque<std::string> frames_;
  simdjson::dom::parser parser_;
  int64_t next_id_ = 1;
};

}  // namespace motor::client
