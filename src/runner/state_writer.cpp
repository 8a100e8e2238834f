#include "runner/state_writer.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>

#include "motor/fd_io.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "base/helper_process.hpp"
#include "base/log.hpp"
#include "runner/state_store.hpp"

namespace motor::runner {
namespace {

// How long after a failed write (a full disk) the newest state is written again.
constexpr uint64_t kRetryMs = 1000;
// A helper that dies again this soon after it was started is not started a third time: the
// writes are then made on the loop.
constexpr uint64_t kRestartWindowMs = 1000;

Status apply_in_helper(std::optional<StateDb>& db, const std::string& state_dir, std::string_view text) {
  auto changes = decode_changes(text);
  if (!changes) return changes.error();
  if (!db) {
    auto opened = StateDb::open(state_dir);
    if (!opened) return opened.error();
    db = std::move(*opened);
  }
  return db->apply(*changes);  // a failed one rolled back whole; the connection stays usable
}

// The helper: read length-prefixed changes (join_changes' JSON), apply them in one transaction,
// answer a 2-byte big-endian length and that many bytes: nothing = durable, else why it is not.
[[noreturn]] void helper_main(int fd, const std::string& state_dir) {
  std::optional<StateDb> db;  // opened here, after the fork: a connection never crosses one
  if (auto opened = StateDb::open(state_dir)) db = std::move(*opened);  // else at the first write
  for (;;) {
    unsigned char h[4];
    if (!read_exact(fd, reinterpret_cast<char*>(h), 4)) _exit(0);
    const size_t len = (size_t{h[0]} << 24) | (size_t{h[1]} << 16) | (size_t{h[2]} << 8) | h[3];
    std::string text(len, '\0');
    if (!read_exact(fd, text.data(), len)) _exit(0);
    // Test build only: a slow disk (include/motor/test_switches.hpp). This is the helper, not the loop.
    if (const unsigned ms = test_switches().state_save_delay_ms) usleep(ms * 1000);
    auto s = apply_in_helper(db, state_dir, text);
    std::string why = s ? std::string() : s.error().message.substr(0, 1000);
    if (!s) log_error("saving state: {}", why);
    const char answer_len[2] = {static_cast<char>(why.size() >> 8), static_cast<char>(why.size() & 0xff)};
    if (!write_all(fd, answer_len, 2) || !write_all(fd, why.data(), why.size())) _exit(0);
  }
}

}  // namespace

StateWriter::~StateWriter() {
  stop();
  retry_timer_.close();
}

Status StateWriter::start(uv_loop_t* loop, std::string state_dir) {
  loop_ = loop;
  state_dir_ = std::move(state_dir);
  if (auto s = reactor::uv_status(retry_timer_.init(this, uv_timer_init, loop_), "the state writer's retry timer"); !s) return s;
  return start_helper();
}

Status StateWriter::start_helper() {
  const std::string& dir = state_dir_;
  auto helper = fork_helper_process("motor-state", [&dir](int fd) { helper_main(fd, dir); });
  if (!helper) return helper.error();
  pid_ = helper->pid;
  last_restart_ms_ = uv_now(loop_);
  acks_.clear();
  pipe_ = std::make_unique<reactor::UvHandle<uv_pipe_t>>();  // a closed handle cannot be reused
  auto failed = [this](const char* what, int rc) -> Status {
    end_helper();
    return make_error("io", fmt::format("{} the state writer's pipe: {}", what, uv_strerror(rc)));
  };
  if (int rc = uv_pipe_init(loop_, pipe_->get(), 0); rc != 0) return failed("setting up", rc);
  pipe_->initialized(this);
  if (int rc = uv_pipe_open(pipe_->get(), helper->channel.get()); rc != 0) return failed("opening", rc);
  (void)helper->channel.release();  // the pipe owns it now
  const int rc = uv_read_start(
      pipe_->stream(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = static_cast<StateWriter*>(h->data);
        *buf = self ? uv_buf_init(self->ack_buf_, sizeof self->ack_buf_) : uv_buf_init(nullptr, 0);
      },
      [](uv_stream_t* h, ssize_t nread, const uv_buf_t* buf) {
        if (auto* self = static_cast<StateWriter*>(h->data)) self->on_ack(nread, buf);
      });
  if (rc != 0) return failed("reading", rc);
  uv_unref(pipe_->handle());  // never keeps the loop alive by itself
  return {};
}

void StateWriter::end_helper() {
  if (pipe_) pipe_->close();
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

void StateWriter::write(std::string change, std::vector<Waiter> waiters) {
  if (!writing_ && !failing_) {
    in_flight_waiters_ = std::move(waiters);
    send({std::move(change)});
    return;
  }
  // Queued behind the write in flight: the next transaction carries every change so far.
  next_.push_back(std::move(change));
  for (auto& w : waiters) next_waiters_.push_back(std::move(w));
}

void StateWriter::send(std::vector<std::string> changes) {
  writing_ = true;
  in_flight_ = std::move(changes);
  const std::string text = join_changes(in_flight_);
  if (pid_ <= 0) {
    // No helper (it could not be started): the write is made here, on the loop.
    auto s = apply_changes_now(state_dir_, text);
    if (!s) log_error("saving state: {}", s.error().message);
    on_result(std::move(s));
    return;
  }
  auto* req = new std::pair<uv_write_t, std::string>();
  const auto n = static_cast<uint32_t>(text.size());
  req->second.reserve(text.size() + 4);
  req->second.push_back(static_cast<char>(n >> 24));
  req->second.push_back(static_cast<char>(n >> 16));
  req->second.push_back(static_cast<char>(n >> 8));
  req->second.push_back(static_cast<char>(n));
  req->second.append(text);
  req->first.data = this;
  uv_buf_t b = uv_buf_init(req->second.data(), static_cast<unsigned>(req->second.size()));
  const int rc = uv_write(&req->first, pipe_->stream(), &b, 1, [](uv_write_t* w, int status) {
    auto* pipe_data = w->handle->data;  // null once the pipe is being closed
    delete reinterpret_cast<std::pair<uv_write_t, std::string>*>(w);
    if (status < 0 && pipe_data) static_cast<StateWriter*>(pipe_data)->helper_lost(uv_strerror(status));
  });
  if (rc != 0) {
    delete req;
    helper_lost(uv_strerror(rc));
  }
}

void StateWriter::on_ack(ssize_t nread, const uv_buf_t*) {
  if (nread < 0) return helper_lost(nread == UV_EOF ? "it exited" : uv_strerror(static_cast<int>(nread)));
  acks_.append(ack_buf_, static_cast<size_t>(nread));
  while (acks_.size() >= 2) {
    const size_t len = (size_t{static_cast<unsigned char>(acks_[0])} << 8) | static_cast<unsigned char>(acks_[1]);
    if (acks_.size() < 2 + len) break;
    std::string why = acks_.substr(2, len);
    acks_.erase(0, 2 + len);
    on_result(why.empty() ? Status{} : Status(make_error("io", why)));
  }
}

void StateWriter::on_result(Status result) {
  if (!writing_) return;
  writing_ = false;
  auto waiters = std::move(in_flight_waiters_);
  in_flight_waiters_.clear();
  if (result) {
    failing_ = false;
    in_flight_.clear();
    send_next();
    for (auto& w : waiters) {
      if (w.durable) w.durable();
    }
    return;
  }
  // Failed (rolled back whole): these changes and every later one are written again on the
  // timer; what could not wait hears now.
  failing_ = true;
  in_flight_.insert(in_flight_.end(), std::make_move_iterator(next_.begin()), std::make_move_iterator(next_.end()));
  next_ = std::move(in_flight_);
  in_flight_.clear();
  std::vector<Waiter> failed;
  for (auto& w : waiters) (w.failed ? failed : next_waiters_).push_back(std::move(w));
  if (retry_timer_.live()) uv_timer_start(retry_timer_.get(), [](uv_timer_t* h) {
    auto* self = reactor::owner_of<StateWriter>(h);
    if (!self || self->writing_) return;
    self->failing_ = false;
    self->send_next();
  }, kRetryMs, 0);
  for (auto& w : failed) w.failed(result.error());
}

void StateWriter::send_next() {
  if (writing_ || next_.empty()) return;
  in_flight_waiters_ = std::move(next_waiters_);
  next_waiters_.clear();
  std::vector<std::string> changes = std::move(next_);
  next_.clear();
  send(std::move(changes));
}

void StateWriter::helper_lost(const std::string& why) {
  if (pid_ <= 0) return;
  log_error("the state writer (pid {}) is gone ({})", pid_, why);
  end_helper();  // it closed its end (or died): make sure it is gone, and reap it
  if (uv_now(loop_) - last_restart_ms_ < kRestartWindowMs) {
    log_error("the state writer died within {} ms of its start; state.json is now saved on the loop", kRestartWindowMs);
  } else if (auto s = start_helper(); !s) {
    log_error("the state writer could not be started again ({}); state.json is now saved on the loop", s.error().message);
  } else {
    log_info("the state writer was started again (pid {})", pid_);
  }
  // The write it had in hand (its answer never came) is made again, by the new helper or here.
  if (writing_) {
    writing_ = false;
    send(std::move(in_flight_));
  }
}

void StateWriter::stop() {
  // Writes after this one are made on the loop (the runner's last save at exit).
  if (retry_timer_.live()) uv_timer_stop(retry_timer_.get());
  if (pid_ > 0) {
    if (pipe_) pipe_->close();  // the helper reads EOF once it has finished the write in hand
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

std::vector<std::string> StateWriter::take_unsaved() {
  if (pid_ > 0) return {};
  // An answer left unread at stop(): the write in hand may or may not have landed; it is made again.
  std::vector<std::string> unsaved = std::move(in_flight_);
  unsaved.insert(unsaved.end(), std::make_move_iterator(next_.begin()), std::make_move_iterator(next_.end()));
  in_flight_.clear();
  next_.clear();
  writing_ = false;
  return unsaved;
}

}  // namespace motor::runner
