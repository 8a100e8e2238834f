#include "vm/helper_call.hpp"

#include <signal.h>

namespace motor::vm {
namespace {
constexpr size_t kMaxAnswer = 8192;
}

Expected<std::unique_ptr<HelperCall>> HelperCall::start(uv_loop_t* loop, const std::string& helper,
                                                        const std::vector<std::string>& args, uint64_t timeout_ms, Done done) {
  std::unique_ptr<HelperCall> call(new HelperCall);
  call->done_ = std::move(done);
  call->what_ = args.empty() ? helper : args[0];
  uv_pipe_init(loop, call->out_.get(), 0);
  call->out_.initialized(call.get());

  std::vector<std::string> argv_storage{helper};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};

  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
  stdio[1].data.stream = call->out_.stream();
  stdio[2].flags = UV_IGNORE;
  uv_process_options_t opts{};
  opts.file = helper.c_str();
  opts.args = argv.data();
  opts.env = envp;
  opts.stdio = stdio;
  opts.stdio_count = 3;
  opts.exit_cb = [](uv_process_t* p, int64_t status, int signal) {
    auto* self = reactor::owner_of<HelperCall>(p);
    if (!self) return;
    self->exited_ = true;
    self->exit_status_ = signal ? 128 + signal : status;
    self->maybe_done();
  };
  if (int rc = uv_spawn(loop, call->process_.get(), &opts); rc != 0) {
    call->process_.initialized(nullptr);  // libuv requires closing it even after a failed spawn
    return make_error("vm", "cannot start " + helper + ": " + uv_strerror(rc));
  }
  call->process_.initialized(call.get());
  uv_read_start(
      call->out_.stream(),
      [](uv_handle_t* h, size_t, uv_buf_t* b) {
        auto* self = static_cast<HelperCall*>(h->data);
        *b = uv_buf_init(self->buf_, sizeof self->buf_);
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* b) {
        auto* self = static_cast<HelperCall*>(s->data);
        if (!self) return;
        if (n > 0) {
          if (self->text_.size() < kMaxAnswer) self->text_.append(b->base, std::min<size_t>(static_cast<size_t>(n), kMaxAnswer - self->text_.size()));
          return;
        }
        if (n == 0) return;
        self->eof_ = true;
        uv_read_stop(s);
        self->maybe_done();
      });
  uv_timer_init(loop, call->timer_.get());
  call->timer_.initialized(call.get());
  uv_timer_start(call->timer_.get(), [](uv_timer_t* t) {
    auto* self = reactor::owner_of<HelperCall>(t);
    if (!self || self->exited_) return;
    self->timed_out_ = true;
    uv_process_kill(self->process_.get(), SIGKILL);
  }, timeout_ms, 0);
  return call;
}

HelperCall::~HelperCall() {
  // Owner gone before the helper ended: kill it by its pid (libuv still reaps it).
  if (process_.live() && !exited_) uv_process_kill(process_.get(), SIGKILL);
}

void HelperCall::maybe_done() {
  if (finished_ || !exited_ || !eof_) return;
  finished_ = true;
  timer_.close();
  while (!text_.empty() && (text_.back() == '\n' || text_.back() == '\r')) text_.pop_back();
  Done done = std::move(done_);
  if (timed_out_) return done(make_error("vm", "motor-vm-helper " + what_ + " did not finish in time"));
  if (exit_status_ == 0 && (text_ == "ok" || text_.rfind("ok ", 0) == 0)) {
    return done(text_.size() > 3 ? text_.substr(3) : std::string());
  }
  std::string msg = text_.rfind("error ", 0) == 0 ? text_.substr(6) : text_;
  if (msg.empty()) msg = "motor-vm-helper " + what_ + " failed (status " + std::to_string(exit_status_) + ")";
  done(make_error("vm", msg));
}

}  // namespace motor::vm
