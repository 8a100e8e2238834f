// One client connection: a Unix stream socket on the loop, framed requests in, replies and
// stream records out. A session owns its memory until libuv's close callback: write callbacks
// that arrive while it closes still find it.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/frame.hpp"

namespace motor::runner {

class Runner;

class Session {
 public:
  // Accepts one connection from `server`; the session registers itself with the runner.
  static Session* accept(Runner& runner, uv_stream_t* server);

  uid_t peer_uid() const { return peer_uid_; }
  gid_t peer_gid() const { return peer_gid_; }
  pid_t peer_pid() const { return peer_pid_; }
  const std::string& caller() const { return caller_; }
  // Set by the connect bridge: the session is then that caller, and no longer privileged.
  void set_caller(std::string caller) {
    caller_ = std::move(caller);
    privileged_ = false;
  }
  // The operator (root) and the runner's own account (the `connect` bridge) see every job.
  bool privileged() const { return privileged_; }
  bool closed() const { return closing_; }

  // Queues one message (a JSON object) as a frame. Replies always go out; a client that lets
  // replies pile up past a hard bound is disconnected.
  static constexpr bool kSensitive = true;
  // `sensitive`: the bytes hold a secret; every copy is wiped once written.
  void send(std::string json, bool sensitive = false);
  // Stream records go out only while the bytes in flight are below the per-client bound; the
  // job feeds more when on_drained tells it there is room.
  bool has_room() const { return !closing_ && in_flight_ < room_bytes_; }
  size_t in_flight() const { return in_flight_; }

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

  uv_pipe_t pipe_{};
  Runner& runner_;
  protocol::FrameDecoder decoder_;
  std::vector<std::string> frames_;
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
  std::string caller_;
  std::vector<std::string> followed_;
};

}  // namespace motor::runner
