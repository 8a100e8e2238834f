#include "runner/session.hpp"

#include <pwd.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "protocol/messages.hpp"
#include "runner/bridge_account.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"

namespace motor::runner {
namespace {

// One frame in flight: a head and (for an output record) its body, freed once written.
struct WriteRequest {
  uv_write_t req{};
  std::string head, body;
  Session* session = nullptr;
  bool sensitive = false;
  size_t size() const { return head.size() + body.size(); }
  void wipe_and_delete() {
    if (sensitive) {
      explicit_bzero(head.data(), head.size());
      explicit_bzero(body.data(), body.size());
    }
    delete this;
  }
};

std::string user_name(uid_t uid) {
  char buf[4096];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return pw.pw_name;
  return fmt::format("uid-{}", uid);
}

// Past this many bytes of unread replies a client is not reading at all; it is cut off.
constexpr size_t kHardReplyBound = 16u << 20;

}  // namespace

Session::Session(Runner& runner, size_t room_bytes) : runner_(runner), room_bytes_(room_bytes) {}

Session* Session::accept(Runner& runner, uv_stream_t* server) {
  auto* s = new Session(runner, static_cast<size_t>(runner.config().client_buffer_bytes));
  if (uv_pipe_init(server->loop, &s->pipe_, 0) != 0) {  // nothing to close: the connection waits for the next accept
    delete s;
    return nullptr;
  }
  s->pipe_.data = s;
  if (uv_accept(server, reinterpret_cast<uv_stream_t*>(&s->pipe_)) != 0) {
    s->closing_ = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&s->pipe_), [](uv_handle_t* h) { delete static_cast<Session*>(h->data); });
    return nullptr;
  }
  uv_os_fd_t fd = -1;
  uv_fileno(reinterpret_cast<uv_handle_t*>(&s->pipe_), &fd);
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    s->peer_uid_ = cred.uid;
    s->peer_gid_ = cred.gid;
    s->peer_pid_ = cred.pid;
  }
  s->privileged_ = s->peer_uid_ == 0 || s->peer_uid_ == geteuid();
  s->from_bridge_account_ = !s->privileged_ && bridge_uid() == s->peer_uid_;
  s->caller_ = user_name(s->peer_uid_);
  s->last_received_ms_ = s->last_drained_ms_ = uv_now(server->loop);
  runner.session_opened(s);
  if (s->closing_ || s->close_when_flushed_) return s;  // refused by the runner
  s->start_reading();
  return s;
}

void Session::start_reading() {
  if (reading_ || closing_ || close_when_flushed_ || framing_error_) return;
  const int rc = uv_read_start(
      reinterpret_cast<uv_stream_t*>(&pipe_),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        (void)h;
        *buf = uv_buf_init(read_buf_, sizeof read_buf_);
      },
      [](uv_stream_t* h, ssize_t nread, const uv_buf_t* buf) { static_cast<Session*>(h->data)->on_read(nread, buf); });
  if (rc != 0) {
    log_warning("session {}: cannot read from the connection: {}", caller_, uv_strerror(rc));
    close();
    return;
  }
  reading_ = true;
}

bool Session::has_room() const { return !closing_ && in_flight_ < room_bytes_ && runner_.buffered_has_room(); }

void Session::on_read(ssize_t nread, const uv_buf_t* buf) {
  if (closing_) return;
  if (nread == UV_EOF) {
    if (decoder_.mid_frame()) log_info("session {}: the client closed mid-frame (torn frame)", caller_);
    close();
    return;
  }
  if (nread < 0) {
    log_info("session {}: reading from the connection failed ({}); closing it", caller_, uv_strerror(static_cast<int>(nread)));
    close();
    return;
  }
  const uint64_t now = uv_now(pipe_.loop);
  last_received_ms_ = now;
  frames_.clear();
  auto fed = decoder_.feed(std::string_view(buf->base, static_cast<size_t>(nread)), frames_);
  for (auto& frame : frames_) pending_.push_back(std::move(frame));
  // A frame begun and not finished is timed from its first byte (frame_timeout_s).
  if (!decoder_.mid_frame()) frame_begun_ms_ = 0;
  else if (frame_begun_ms_ == 0 || !frames_.empty()) frame_begun_ms_ = now;
  // Frames that were complete before a framing error are still answered, in order.
  if (!fed) framing_error_ = fed.error();
  serve_pending();
}

void Session::serve_pending() {
  if (awaiting_turn_) return;  // turn_came() serves on
  // Replies wait while this client's own buffer is full, or all clients together are past the
  // total and its reserve for replies (Runner::replies_have_room).
  while (!pending_.empty() && !closing_ && !close_when_flushed_ && in_flight_ < room_bytes_ && runner_.replies_have_room()) {
    // A few requests per loop iteration, all sessions together (Runner::take_request_turn).
    if (!runner_.take_request_turn()) {
      awaiting_turn_ = true;
      runner_.await_request_turn(*this);
      break;
    }
    const std::string frame = std::move(pending_.front());
    pending_.pop_front();
    runner_.handle_frame(*this, frame);
  }
  if (closing_ || close_when_flushed_) return;
  if (!pending_.empty()) {
    // The client does not read its replies: read no more requests until it does.
    if (reading_) {
      uv_read_stop(reinterpret_cast<uv_stream_t*>(&pipe_));
      reading_ = false;
    }
    return;
  }
  if (framing_error_) {
    // The framing is broken: nothing after this point can be trusted to be a frame boundary.
    send(protocol::encode_error(std::nullopt, framing_error_->code, framing_error_->message));
    close_after_flush();
    return;
  }
  start_reading();
}

void Session::turn_came() {
  awaiting_turn_ = false;
  serve_pending();
}

void Session::send(std::string json, bool sensitive) {
  if (closing_) {
    if (sensitive) explicit_bzero(json.data(), json.size());
    return;
  }
  std::string frame;
  frame.reserve(json.size() + 4);
  protocol::append_frame(frame, json);
  if (sensitive) explicit_bzero(json.data(), json.size());
  send_frame(std::move(frame), {}, sensitive);
}

void Session::send_frame(std::string head, std::string body, bool sensitive) {
  auto* w = new WriteRequest;
  w->head = std::move(head);
  w->body = std::move(body);
  w->sensitive = sensitive;
  w->session = this;
  if (closing_) return w->wipe_and_delete();
  const size_t bytes = w->size();
  in_flight_ += bytes;
  runner_.buffered_changed(static_cast<int64_t>(bytes));
  uv_buf_t b[2] = {uv_buf_init(w->head.data(), static_cast<unsigned>(w->head.size())),
                   uv_buf_init(w->body.data(), static_cast<unsigned>(w->body.size()))};
  const int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&pipe_), b, w->body.empty() ? 1 : 2, [](uv_write_t* req, int) {
    auto* done = reinterpret_cast<WriteRequest*>(req);
    Session* s = done->session;
    const size_t n = done->size();
    done->wipe_and_delete();
    s->on_write_done(n);
  });
  if (rc != 0) {
    log_info("session {}: cannot write to the connection ({}); closing it", caller_, uv_strerror(rc));
    in_flight_ -= bytes;
    runner_.buffered_changed(-static_cast<int64_t>(bytes));
    w->wipe_and_delete();
    close();
    return;
  }
  if (in_flight_ > kHardReplyBound + room_bytes_) {
    log_warning("session {}: {} bytes of replies unread; disconnecting", caller_, in_flight_);
    close();
  }
}

void Session::on_write_done(size_t bytes) {
  in_flight_ -= bytes;
  runner_.buffered_changed(-static_cast<int64_t>(bytes));
  if (closing_) return;
  last_drained_ms_ = uv_now(pipe_.loop);
  if (close_when_flushed_) {
    if (in_flight_ == 0) close();
    return;
  }
  if (in_flight_ < room_bytes_) {
    serve_pending();
    if (!closing_ && !close_when_flushed_) runner_.session_drained(*this);
  }
}

void Session::close_after_flush() {
  if (closing_) return;
  close_when_flushed_ = true;
  if (reading_) uv_read_stop(reinterpret_cast<uv_stream_t*>(&pipe_));
  reading_ = false;
  if (in_flight_ == 0) close();
}

void Session::close() {
  if (closing_) return;
  closing_ = true;
  runner_.session_closed(*this);
  // Pending writes complete (cancelled) before the close callback frees the session.
  uv_close(reinterpret_cast<uv_handle_t*>(&pipe_), [](uv_handle_t* h) { delete static_cast<Session*>(h->data); });
}

}  // namespace motor::runner
