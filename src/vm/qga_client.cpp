#include "vm/qga_client.hpp"

#include <simdjson.h>
#include <sys/random.h>

namespace motor::vm {

QgaClient::~QgaClient() {
  pending_ = nullptr;
  connect_done_ = nullptr;
}

void QgaClient::connect(const std::string& socket_path, std::function<void(Status)> done) {
  connect_done_ = std::move(done);
  int rc = pipe_.init(this, uv_pipe_init, loop_, 0);
  if (rc == 0) rc = timer_.init(this, uv_timer_init, loop_);
  if (auto s = reactor::uv_status(rc, "the guest agent's pipe"); !s) {
    broken_ = true;
    auto failed = std::move(connect_done_);
    return failed(s);
  }
  connect_req_.data = this;
  uv_pipe_connect(&connect_req_, pipe_.get(), socket_path.c_str(), [](uv_connect_t* req, int status) {
    // The pipe's data pointer is cleared when the client is destroyed first.
    auto* self = static_cast<QgaClient*>(req->handle->data);
    if (!self) return;
    auto connected = std::move(self->connect_done_);
    if (status < 0) {
      self->broken_ = true;
      if (connected) connected(make_error("vm", std::string("cannot connect to the guest agent's socket: ") + uv_strerror(status)));
      return;
    }
    const int read_rc = uv_read_start(
        self->pipe_.stream(),
        [](uv_handle_t* h, size_t, uv_buf_t* b) {
          auto* s = static_cast<QgaClient*>(h->data);
          *b = uv_buf_init(s->buf_.get(), kReadChunk);
        },
        [](uv_stream_t* st, ssize_t n, const uv_buf_t* b) {
          if (auto* s = static_cast<QgaClient*>(st->data)) s->on_read(n, b);
        });
    if (read_rc != 0) self->broken_ = true;
    if (connected) connected(reactor::uv_status(read_rc, "reading the guest agent's socket"));
  });
}

void QgaClient::fail(const Error& e) {
  broken_ = true;
  if (timer_.live()) uv_timer_stop(timer_.get());
  if (pipe_.live() && !uv_is_closing(pipe_.handle())) uv_read_stop(pipe_.stream());
  if (auto reply = std::move(pending_)) {
    pending_ = nullptr;
    reply(e);
  }
}

void QgaClient::on_read(ssize_t n, const uv_buf_t* buf) {
  if (n == 0) return;
  if (n < 0) return fail(make_error("guest_agent", "the guest agent's channel closed"));
  bytes_received_ += static_cast<uint64_t>(n);
  messages_.clear();
  if (auto s = framer_.feed(std::string_view(buf->base, static_cast<size_t>(n)), messages_); !s) return fail(s.error());
  if (messages_.empty()) return;
  // One request in flight, so at most one reply: anything more is a guest speaking unasked.
  if (!pending_ || messages_.size() > 1) return fail(make_error("guest_agent", "the guest agent sent a message nobody asked for"));
  uv_timer_stop(timer_.get());
  auto reply = std::move(pending_);
  pending_ = nullptr;
  reply(std::move(messages_.front()));  // may issue the next request, or destroy this client: touch nothing after
}

void QgaClient::request(std::string line, uint64_t timeout_ms, Reply reply) {
  if (broken_ || !pipe_.live()) return reply(make_error("guest_agent", "the guest agent connection is closed"));
  if (pending_) return reply(make_error("guest_agent", "a guest agent request is already in flight"));
  pending_ = std::move(reply);
  auto* w = new Write;
  w->data = std::move(line);
  w->req.data = w;
  uv_buf_t b = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
  int rc = uv_write(&w->req, pipe_.stream(), &b, 1, [](uv_write_t* req, int) { delete static_cast<Write*>(req->data); });
  if (rc != 0) {
    delete w;
    return fail(make_error("guest_agent", std::string("writing to the guest agent: ") + uv_strerror(rc)));
  }
  rc = uv_timer_start(timer_.get(), [](uv_timer_t* t) {
    if (auto* self = reactor::owner_of<QgaClient>(t)) self->fail(make_error("guest_agent", "the guest agent did not answer in time"));
  }, timeout_ms, 0);
  if (auto s = reactor::uv_status(rc, "the guest agent's reply timer"); !s) fail(s.error());
}

void QgaClient::sync(uint64_t timeout_ms, std::function<void(Status)> done) {
  int64_t id = 0;
  if (getrandom(&id, sizeof id, 0) != sizeof id) id = static_cast<int64_t>(uv_hrtime());
  id = (id & 0x3fffffffffffLL) + (++next_sync_id_);  // positive, fits a JSON number exactly
  request(qga_sync_delimited(id), timeout_ms, [this, id, done = std::move(done)](Expected<std::string> msg) {
    if (!msg) return done(msg.error());
    simdjson::dom::parser parser;
    auto got = qga_parse_int_return(parser, *msg);
    if (!got) return done(got.error());
    if (*got != id) {
      fail(make_error("guest_agent", "the guest agent answered guest-sync with the wrong id"));
      return done(make_error("guest_agent", "the guest agent answered guest-sync with the wrong id"));
    }
    done(Status{});
  });
}

}  // namespace motor::vm
