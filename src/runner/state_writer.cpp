#include "runner/state_writer.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "motor/fd_io.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "runner/atomic_file.hpp"
#include "runner/helper_process.hpp"
#include "runner/log.hpp"

namespace motor::runner {
namespace {


// The helper: read a length-prefixed state, write it atomically, answer one byte (0 = durable).
[[noreturn]] void helper_main(int fd, const std::string& state_dir) {  for (;;) {
    unsigned char h[4];
    if (!read_exact(fd, reinterpret_cast<char*>(h), 4)) _exit(0);
    const size_t len = (size_t{h[0]} << 24) | (size_t{h[1]} << 16) | (size_t{h[2]} << 8) | h[3];
    std::string text(len, '\0');
    if (!read_exact(fd, text.data(), len)) _exit(0);
    // Test build only: a slow disk (include/motor/test_switches.hpp). This is the helper, not the loop.
    if (const unsigned ms = test_switches().state_save_delay_ms) usleep(ms * 1000);
    auto s = write_file_atomically(state_dir + "/state.json", text, 0600);
    if (!s) log_error("saving state: {}", s.error().message);
    const char ack = s ? 0 : 1;
    if (::write(fd, &ack, 1) != 1) _exit(0);
  }
}

}  // namespace

StateWriter::~StateWriter() { stop(); }

Status StateWriter::start(uv_loop_t* loop, std::string state_dir) {
  loop_ = loop;
  auto helper = fork_helper_process("motor-state", [&state_dir](int fd) { helper_main(fd, state_dir); });
  if (!helper) return helper.error();
  pid_ = helper->pid;
  uv_pipe_init(loop, pipe_.get(), 0);
  pipe_.initialized(this);
  uv_pipe_open(pipe_.get(), helper->channel.release());
  uv_read_start(
      pipe_.stream(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = static_cast<StateWriter*>(h->data);
        *buf = uv_buf_init(self->ack_buf_, sizeof self->ack_buf_);
      },
      [](uv_stream_t* h, ssize_t nread, const uv_buf_t* buf) {
        if (auto* self = static_cast<StateWriter*>(h->data)) self->on_ack(nread, buf);
      });
  uv_unref(pipe_.handle());  // never keeps the loop alive by itself
  return {};
}

void StateWriter::write(std::string text, std::vector<Done> done) {
  if (!in_flight_) {
    in_flight_done_ = std::move(done);
    send(std::move(text));
    return;
  }
  // Newer state supersedes what waited: one write covers every change so far.
  next_text_ = std::move(text);
  for (auto& d : done) next_done_.push_back(std::move(d));
}

void StateWriter::send(std::string text) {
  in_flight_ = true;
  auto* req = new std::pair<uv_write_t, std::string>();
  const auto n = static_cast<uint32_t>(text.size());
  req->second.reserve(text.size() + 4);
  req->second.push_back(static_cast<char>(n >> 24));
  req->second.push_back(static_cast<char>(n >> 16));
  req->second.push_back(static_cast<char>(n >> 8));
  req->second.push_back(static_cast<char>(n));
  req->second.append(text);
  uv_buf_t b = uv_buf_init(req->second.data(), static_cast<unsigned>(req->second.size()));
  if (uv_write(&req->first, pipe_.stream(), &b, 1, [](uv_write_t* w, int) {
        delete reinterpret_cast<std::pair<uv_write_t, std::string>*>(w);
      }) != 0) {
    delete req;
    log_error("the state writer is gone; state.json is no longer saved");
  }
}

void StateWriter::on_ack(ssize_t nread, const uv_buf_t*) {
  if (nread < 0) {
    log_error("the state writer stopped; state.json is no longer saved");
    pipe_.close();
    return;
  }
  for (ssize_t i = 0; i < nread; ++i) {
    in_flight_ = false;
    auto done = std::move(in_flight_done_);
    in_flight_done_.clear();
    if (next_text_) {
      in_flight_done_ = std::move(next_done_);
      next_done_.clear();
      std::string text = std::move(*next_text_);
      next_text_.reset();
      send(std::move(text));
    }
    for (auto& d : done) d();
  }
}

void StateWriter::stop() {
  if (pid_ <= 0) return;
  pipe_.close();  // the helper reads EOF once it has finished the write in hand
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace motor::runner
