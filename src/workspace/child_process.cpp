#include "workspace/child_process.hpp"

#include <signal.h>

#include <fmt/format.h>

namespace motor::workspace {
namespace {

constexpr size_t kErrTailBytes = 4096;

struct Child {
  uv_loop_t* loop = nullptr;
  uv_process_t process{};
  uv_pipe_t out{}, err{};
  uv_timer_t timer{};
  ChildSpec spec;
  ChildResult result;
  std::function<void(ChildResult)> done;
  int open_handles = 0;
  int pending = 0;  // exit + two EOFs
  char buf[64 * 1024];

  void closed() {
    if (--open_handles == 0) delete this;
  }
  void close(uv_handle_t* h) {
    if (uv_is_closing(h)) return;
    uv_close(h, [](uv_handle_t* hh) { static_cast<Child*>(hh->data)->closed(); });
  }
  void step() {
    if (--pending > 0) return;
    uv_timer_stop(&timer);
    auto cb = std::move(done);
    ChildResult r = std::move(result);
    close(reinterpret_cast<uv_handle_t*>(&timer));
    close(reinterpret_cast<uv_handle_t*>(&process));
    close(reinterpret_cast<uv_handle_t*>(&out));
    close(reinterpret_cast<uv_handle_t*>(&err));
    if (cb) cb(std::move(r));
  }
  void on_read(uv_stream_t* s, ssize_t n) {
    if (n < 0) {
      uv_read_stop(s);
      step();
      return;
    }
    const size_t len = static_cast<size_t>(n);
    if (s == reinterpret_cast<uv_stream_t*>(&out)) {
      const size_t room = spec.max_stdout_bytes > result.out.size() ? spec.max_stdout_bytes - result.out.size() : 0;
      if (len > room) result.stdout_truncated = true;
      result.out.append(buf, std::min(len, room));
    } else {
      result.err_tail.append(buf, len);
      if (result.err_tail.size() > 2 * kErrTailBytes) result.err_tail.erase(0, result.err_tail.size() - kErrTailBytes);
    }
  }
};

}  // namespace

std::string ChildResult::describe() const {
  if (!spawn_error.empty()) return "could not start: " + spawn_error;
  std::string tail = err_tail.size() > kErrTailBytes ? err_tail.substr(err_tail.size() - kErrTailBytes) : err_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  for (char& c : tail) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = ' ';
  }
  std::string head = timed_out ? "timed out" : term_signal ? fmt::format("killed by signal {}", term_signal)
                                                            : fmt::format("exit {}", exit_code);
  return tail.empty() ? head : head + ": " + tail;
}

void run_child(uv_loop_t* loop, ChildSpec spec, std::function<void(ChildResult)> done) {
  auto* c = new Child;
  c->loop = loop;
  c->spec = std::move(spec);
  c->done = std::move(done);
  for (auto* h : {reinterpret_cast<uv_handle_t*>(&c->out), reinterpret_cast<uv_handle_t*>(&c->err)}) h->data = c;
  uv_pipe_init(loop, &c->out, 0);
  uv_pipe_init(loop, &c->err, 0);
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  c->process.data = c;
  c->open_handles = 3;

  std::vector<char*> argv, env;
  for (auto& a : c->spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : c->spec.env) env.push_back(e.data());
  env.push_back(nullptr);
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  if (c->spec.stdin_fd >= 0) {
    stdio[0].flags = UV_INHERIT_FD;
    stdio[0].data.fd = c->spec.stdin_fd;
  }
  stdio[1].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
  stdio[1].data.stream = reinterpret_cast<uv_stream_t*>(&c->out);
  stdio[2].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
  stdio[2].data.stream = reinterpret_cast<uv_stream_t*>(&c->err);
  uv_process_options_t opts{};
  opts.file = c->spec.file.c_str();
  opts.args = argv.data();
  opts.env = env.data();
  opts.cwd = c->spec.cwd.c_str();
  opts.stdio = stdio;
  opts.stdio_count = 3;
  if (c->spec.uid) {
    opts.flags |= UV_PROCESS_SETUID;
    opts.uid = *c->spec.uid;
  }
  if (c->spec.gid) {
    opts.flags |= UV_PROCESS_SETGID;
    opts.gid = *c->spec.gid;
  }
  opts.exit_cb = [](uv_process_t* p, int64_t status, int sig) {
    auto* self = static_cast<Child*>(p->data);
    self->result.exit_code = sig ? -1 : static_cast<int>(status);
    self->result.term_signal = sig;
    self->step();
  };
  const int rc = uv_spawn(loop, &c->process, &opts);
  if (rc != 0) {
    c->result.spawn_error = fmt::format("{}: {}", c->spec.file, uv_strerror(rc));
    c->open_handles = 4;  // uv_spawn initialized the process handle even when it failed
    c->pending = 1;
    c->step();
    return;
  }
  c->open_handles = 4;
  c->pending = 3;
  auto alloc = [](uv_handle_t* h, size_t, uv_buf_t* b) {
    auto* self = static_cast<Child*>(h->data);
    *b = uv_buf_init(self->buf, sizeof self->buf);
  };
  auto read = [](uv_stream_t* s, ssize_t n, const uv_buf_t*) { static_cast<Child*>(s->data)->on_read(s, n); };
  uv_read_start(reinterpret_cast<uv_stream_t*>(&c->out), alloc, read);
  uv_read_start(reinterpret_cast<uv_stream_t*>(&c->err), alloc, read);
  uv_timer_start(&c->timer, [](uv_timer_t* t) {
    auto* self = static_cast<Child*>(t->data);
    self->result.timed_out = true;
    uv_process_kill(&self->process, SIGKILL);
  }, c->spec.timeout_ms, 0);
}

}  // namespace motor::workspace
