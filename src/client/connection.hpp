// The client's side of a session: a blocking socket carrying frames, to the runner's Unix socket
// or to an SSH session (ssh_session.hpp) that reaches `motor-runner connect` on another host.
#pragma once

#include "motor/simdjson_fwd.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "client/ssh_session.hpp"
#include "client/ssh_spare.hpp"
#include "client/ssh_target.hpp"
#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

namespace motor::client {

class Connection {
 public:
  static Expected<Connection> open(const std::string& socket_path);
  // The socket, or over SSH: takes a spare session from the keeper (ssh_spare.hpp) or starts one
  // (riding or starting the control master, replacing a dead one), and asks runner.hello (request id 0, its reply not shown), so that a host that is
  // not reachable, a refused key, an account without the bridge, a runner down behind SSH or too
  // old fail here, each with its own error code (ssh_session.hpp). `ssh_command`:
  // $MOTOR_SSH_COMMAND.
  static Expected<Connection> open(const Endpoint& endpoint, const char* ssh_command);
  // A stream already connected to a runner or its bridge (the gate's socket pair to
  // `motor-runner connect`): no hello is sent.
  static Connection adopt(UniqueFd fd) { return Connection(std::move(fd)); }
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  ~Connection();

  // Sends {"id":N,"method":M,"params":P}; returns N.
  Expected<int64_t> request(std::string_view method, std::string_view params_json);
  // If the runner refused the connection (and closed it) before or while this was written, the
  // error is the runner's refusal (e.g. "unauthorized" with its reason), never "Broken pipe".
  Status send_raw(std::string_view payload);
  // Reads the next message; blocks. `interrupted` is polled when a signal interrupts the wait:
  // if it returns true, read returns an "interrupted" error so the caller can act and call again.
  // An error without a request id refuses the whole connection (unauthorized, runner_full,
  // runner_draining, a broken frame): it is returned as an error with the runner's code.
  // `limit` >= 0: a "timeout" error once it passes (a partial frame is kept for the next read).
  Expected<protocol::Message> read(bool (*interrupted)() = nullptr,
                                   std::chrono::milliseconds limit = std::chrono::milliseconds(-1));

  int fd() const { return fd_.get(); }

 private:
  explicit Connection(UniqueFd fd);
  static Expected<Connection> open_ssh(const SshTarget& target, const char* ssh_command);
  // A spare session's stream, once it answered runner.hello; nullopt sends the call its own way.
  static std::optional<Connection> from_spare(const SshTarget& target, const std::string& control_path, SpareAnswer spare);
  // runner.hello: sent and its answer read and checked; the answer only; an answer as received.
  Status hello(std::chrono::milliseconds limit);
  Status await_hello(std::chrono::milliseconds limit);
  Status check_hello(const std::string& frame);
  // Reads frames into frames_ until there is one; `limit` < 0: no limit. Errors: the stream
  // ended ("unreachable", or over SSH why), a broken frame ("protocol"), "interrupted", "timeout".
  Status fill(bool (*interrupted)(), std::chrono::milliseconds limit);
  Error stream_ended();
  // What the runner sent before it closed the connection, read without waiting: its refusal.
  std::optional<Error> queued_refusal();
  static std::optional<Error> as_refusal(const protocol::Message& m);
  // Declared before fd_, so destroyed after it: the socket closes first, ssh sees EOF and exits.
  std::unique_ptr<SshSession> ssh_;  // null on a spare session (the keeper's ssh) and locally
  std::string remote_host_;          // over SSH: the host, for messages
  bool runner_answered_ = false;
  UniqueFd fd_;
  protocol::FrameDecoder decoder_;
  std::deque<std::string> frames_;
  std::unique_ptr<simdjson::dom::parser> parser_;  // (by pointer: simdjson_fwd.hpp)
  int64_t next_id_ = 1;
};

}  // namespace motor::client
