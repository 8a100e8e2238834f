// One client connection: a Unix stream socket on the loop, framed requests in, replies and
// stream records out. A session owns its memory until libuv's close callback: write callbacks
// that arrive while it closes still find it.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/frame.hpp"
#include "runner/session_id.hpp"

namespace motor::runner {

class Runner;

class Session {
 public:
  // Accepts one connection from `server`; the session registers itself with the runner.
  static Session* accept(Runner& runner, uv_stream_t* server);

  SessionId id() const { return id_; }
  uid_t peer_uid() const { return peer_uid_; }
  gid_t peer_gid() const { return peer_gid_; }
  pid_t peer_pid() const { return peer_pid_; }
  const std::string& caller() const { return caller_; }
  // Set by the connect bridge: the session is then that caller, and no longer privileged.
  void set_caller(std::string caller) {
    caller_ = std::move(caller);
    privileged_ = false;
    bridged_ = true;
  }
  // Named by the bridge: counted per caller name, not per uid (every bridged caller has the
  // runner account's uid).
  bool bridged() const { return bridged_; }
  // The operator (root) and the runner's own account see every job.
  bool privileged() const { return privileged_; }
  // The SSH bridge account (bridge_account.hpp): it must name a caller before anything else.
  bool from_bridge_account() const { return from_bridge_account_; }
  // Root and the bridge account, and no one else, may name callers (runner.identify).
  bool may_name_callers() const { return peer_uid_ == 0 || from_bridge_account_; }
  bool closed() const { return closing_; }

  // Queues one message (a JSON object) as a frame. Replies always go out; a client that lets
  // replies pile up past a hard bound is disconnected.
  static constexpr bool kSensitive = true;
  // `sensitive`: the bytes hold a secret; every copy is wiped once written.
  void send(std::string json, bool sensitive = false);
  // Queues one frame already encoded (length prefix included) as `head` followed by `body`: an
  // output record built whole (protocol/output_frame.hpp), its bytes not copied again.
  void send_frame(std::string head, std::string body = {}, bool sensitive = false);
  // Asked for in runner.hello (ext): this session's output records come as binary frames.
  bool binary_output() const { return binary_output_; }
  void set_binary_output() { binary_output_ = true; }
  // Stream records go out only while the bytes in flight are below the per-client bound and
  // all sessions together are below the runner's total (client_buffer_total); the job feeds more
  // when on_drained tells it there is room.
  bool has_room() const;
  size_t in_flight() const { return in_flight_; }
  // Not reading: a full per-client buffer. Such sessions are cut off first when the total is hit.
  bool unread() const { return in_flight_ >= room_bytes_; }

  // Replies the runner owes this session (an `accepted` after a save, a workspace checkout, a
  // drain to wait for): while any is owed, the session is not idle.
  void owe_reply() { ++owed_replies_; }
  void reply_paid() {
    if (owed_replies_ > 0) --owed_replies_;
  }
  // Loop time (ms) since when a frame has been begun and not finished (0: none), and of the last
  // bytes received.
  uint64_t frame_begun_ms() const { return frame_begun_ms_; }
  uint64_t last_received_ms() const { return last_received_ms_; }
  // Loop time of the last write the client took (or of its connect): how long it has read nothing.
  uint64_t last_read_by_client_ms() const { return last_drained_ms_; }
  // Answers requests read while the total had no room (Runner: the total has room again).
  void resume() { serve_pending(); }
  // This iteration has a request turn for the session again (Runner::await_request_turn).
  void turn_came();
  // Nothing to wait for: no frame begun, nothing in flight, no reply owed, no job followed.
  bool quiet() const {
    return frame_begun_ms_ == 0 && in_flight_ == 0 && owed_replies_ == 0 && followed_.empty() && pending_.empty();
  }

  // Sends what is queued, then closes (after a broken frame or a refused peer).
  void close_after_flush();
  void close();

  // Job ids this session follows (exec.run / exec.attach), to detach on close.
  std::vector<std::string>& followed_jobs() { return followed_; }

 private:
  Session(Runner& runner, size_t room_bytes);
  ~Session() = default;
  void on_read(ssize_t nread, const uv_buf_t* buf);
  void on_write_done(size_t bytes);
  // Answers the frames read so far while the client reads its replies; reading pauses while it
  // does not (a client that sends requests and never reads cannot grow the runner's memory).
  void serve_pending();
  void start_reading();

  static inline uint64_t last_id_ = 0;
  const SessionId id_{++last_id_};
  uv_pipe_t pipe_{};
  Runner& runner_;
  protocol::FrameDecoder decoder_;
  std::vector<std::string> frames_;
  std::deque<std::string> pending_;     // frames read and not answered yet
  std::optional<Error> framing_error_;  // answered after pending_, then the session closes
  bool reading_ = false;
  bool awaiting_turn_ = false;  // the iteration's request turns ran out: turn_came() serves on
  uint64_t frame_begun_ms_ = 0, last_received_ms_ = 0, last_drained_ms_ = 0;
  int owed_replies_ = 0;
  // One read buffer for all sessions: a read is consumed before the next one starts, and an
  // idle session then costs only its own small state.
  static inline char read_buf_[64 * 1024];
  size_t room_bytes_;
  size_t in_flight_ = 0;
  bool closing_ = false;
  bool close_when_flushed_ = false;
  uid_t peer_uid_ = static_cast<uid_t>(-1);
  gid_t peer_gid_ = static_cast<gid_t>(-1);
  pid_t peer_pid_ = 0;
  bool privileged_ = false;
  bool bridged_ = false;
  bool from_bridge_account_ = false;
  bool binary_output_ = false;
  std::string caller_;
  std::vector<std::string> followed_;
};

}  // namespace motor::runner
