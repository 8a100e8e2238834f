#include "reactor/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "reactor/slow_call.hpp"
#include "reactor/iteration_budget.hpp"

namespace motor::reactor {
namespace {

constexpr size_t kErrTailBytes = 4096;
// After the child exited, how long its pipes may stay open: a grandchild that kept them must not
// hold the report back for ever.
constexpr uint64_t kDrainGraceMs = 1000;

}  // namespace

// Every handle is embedded here and counted; the watch deletes itself when the last one closed.
struct ChildProcess::Watch {
  ChildProcess* owner = nullptr;
  Done done;
  uv_process_t process{};
  uv_poll_t pidfd_poll{};
  UniqueFd pidfd;  // adopted children; closed only after pidfd_poll is closed
  uv_pipe_t out{}, err{};
  uv_timer_t timer{};
  std::vector<uv_handle_t*> handles;  // the initialized ones
  int open_handles = 0;
  int pending = 1;  // the exit, plus one EOF per pipe
  bool exited = false;
  ChildExit result;
  std::function<void(std::string_view)> on_stdout;  // streamed instead of collected
  std::function<void(pid_t)> before_reap;           // adopted children: peeks at /proc/PID first
  pid_t pid = -1;
  size_t stdout_bytes = 0;
  char buf[64 * 1024];

  // `rc`: what the handle's uv_*_init returned; only an initialized handle is closed later.
  template <typename T>
  bool track(int rc, T* h) {
    if (rc != 0) return false;
    initialized(h);
    return true;
  }
  template <typename T>
  void initialized(T* h) {
    auto* handle = reinterpret_cast<uv_handle_t*>(h);
    handle->data = this;
    handles.push_back(handle);
    ++open_handles;
  }
  void close_all() {
    if (open_handles == 0) return delete this;
    for (uv_handle_t* h : handles) {
      if (uv_is_closing(h)) continue;
      uv_close(h, [](uv_handle_t* hh) {
        auto* self = static_cast<Watch*>(hh->data);
        if (--self->open_handles == 0) delete self;
      });
    }
  }

  void kill() {
    if (exited) return;
    if (pidfd) {
      (void)syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    } else {
      (void)uv_process_kill(&process, SIGKILL);  // by pid; libuv has not reaped it yet
    }
  }

  // A pipe that cannot be read counts as at EOF (the child may then block on it; the deadline
  // or the owner's kill ends it).
  void start_reading(uv_pipe_t* pipe) {
    const int rc = uv_read_start(
        reinterpret_cast<uv_stream_t*>(pipe),
        [](uv_handle_t* h, size_t, uv_buf_t* b) {
          auto* self = static_cast<Watch*>(h->data);
          *b = uv_buf_init(self->buf, sizeof self->buf);
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t*) { static_cast<Watch*>(s->data)->on_read(s, n); });
    if (rc == 0) ++pending;
  }
  void on_read(uv_stream_t* s, ssize_t n) {
    if (n < 0) {  // EOF or a read error: this pipe is done
      uv_read_stop(s);
      return step();
    }
    const size_t len = static_cast<size_t>(n);
    if (s == reinterpret_cast<uv_stream_t*>(&out)) {
      // Past the bound the rest is read and dropped, so the child never blocks on a full pipe.
      const size_t room = result.max_stdout_bytes - std::min(result.max_stdout_bytes, stdout_bytes);
      if (len > room) result.stdout_truncated = true;
      const size_t take = std::min(len, room);
      stdout_bytes += take;
      if (take > 0 && on_stdout) {
        on_stdout(std::string_view(buf, take));
      } else {
        result.out.append(buf, take);
      }
    } else {
      result.err_tail.append(buf, len);
      if (result.err_tail.size() > 2 * kErrTailBytes) result.err_tail.erase(0, result.err_tail.size() - kErrTailBytes);
    }
  }

  void start_deadline(uint64_t timeout_ms) {
    if (timeout_ms == 0) return;
    const int rc = uv_timer_start(&timer, [](uv_timer_t* t) {
      auto* self = static_cast<Watch*>(t->data);
      self->result.timed_out = true;
      self->kill();
    }, timeout_ms, 0);
    if (rc != 0) {  // a child without its deadline is not left running
      result.timed_out = true;
      kill();
    }
  }
  void on_exit(int exit_code, int term_signal) {
    if (exited) return;
    exited = true;
    result.exit_code = exit_code;
    result.term_signal = term_signal;
    const int rc = uv_timer_start(&timer, [](uv_timer_t* t) { static_cast<Watch*>(t->data)->stop_draining(); }, kDrainGraceMs, 0);
    if (rc != 0) return stop_draining();  // no grace for the pipes: what they hold now is all
    step();
  }
  void stop_draining() {
    for (uv_pipe_t* p : {&out, &err}) {
      if (uv_is_active(reinterpret_cast<uv_handle_t*>(p))) uv_read_stop(reinterpret_cast<uv_stream_t*>(p));
    }
    pending = 1;
    step();
  }
  // An adopted child's pidfd became readable. Past the iteration's budget the exit is taken
  // in a later iteration: the pidfd stays readable until it is reaped.
  void reap() {
    if (IterationBudget::defer()) return;
    if (before_reap) {
      siginfo_t peek{};
      if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd.get()), &peek, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          peek.si_pid != 0) {
        std::exchange(before_reap, nullptr)(pid);
      }
    }
    siginfo_t info{};
    const int rc = waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd.get()), &info, WEXITED | WNOHANG);
    if (rc == 0 && info.si_pid == 0) return;  // not yet
    uv_poll_stop(&pidfd_poll);
    if (rc == 0 && info.si_code == CLD_EXITED) return on_exit(info.si_status, 0);
    on_exit(-1, rc == 0 ? info.si_status : SIGKILL);  // killed or dumped (or reaped by someone else)
  }

  // Once the exit and every EOF are in: close everything, then report (this is gone by then).
  void step() {
    if (--pending > 0) return;
    uv_timer_stop(&timer);
    if (result.err_tail.size() > kErrTailBytes) result.err_tail.erase(0, result.err_tail.size() - kErrTailBytes);
    if (owner) owner->watch_ = nullptr;
    Done cb = std::move(done);
    ChildExit r = std::move(result);
    close_all();
    if (cb) cb(std::move(r));
  }
};

std::string ChildExit::describe() const {
  std::string tail = err_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  for (char& c : tail) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = ' ';
  }
  std::string head = timed_out     ? "timed out"
                     : term_signal ? fmt::format("killed by signal {}", term_signal)
                                   : fmt::format("exit {}", exit_code);
  if (stdout_truncated) head += fmt::format("; output over {} bytes, cut", max_stdout_bytes);
  return tail.empty() ? head : head + ": " + tail;
}

namespace {

// The argv and envp arrays of a spec, null-terminated, pointing into its own copies.
struct ExecVectors {
  explicit ExecVectors(const ChildSpec& spec) : strings(spec.argv) {
    strings.insert(strings.end(), spec.env.begin(), spec.env.end());
    for (size_t i = 0; i < spec.argv.size(); ++i) argv.push_back(strings[i].data());
    argv.push_back(nullptr);
    for (size_t i = spec.argv.size(); i < strings.size(); ++i) env.push_back(strings[i].data());
    env.push_back(nullptr);
  }
  std::vector<std::string> strings;
  std::vector<char*> argv, env;
};

// posix_spawn, which glibc runs with CLONE_VM | CLONE_VFORK: the child execs from the caller's
// memory, so nothing of the caller is copied and the loop waits only until the exec. Its stdin
// is `stdin_fd` or /dev/null, stdout and stderr the given pipes, every signal at its default and
// none blocked (the runner ignores SIGPIPE), as uv_spawn's children have them.
Expected<pid_t> spawn_sharing_memory(const ChildSpec& spec, int stdout_write, int stderr_write) {
  ExecVectors exec(spec);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (posix_spawn_file_actions_init(&actions) != 0) return make_error("spawn_failed", spec.file + ": out of memory");
  if (posix_spawnattr_init(&attr) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return make_error("spawn_failed", spec.file + ": out of memory");
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  int rc = spec.stdin_fd >= 0 ? posix_spawn_file_actions_adddup2(&actions, spec.stdin_fd, 0)
                              : posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, stdout_write, 1);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, stderr_write, 2);
  if (rc == 0) rc = posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str());
  if (rc == 0) rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (rc == 0) rc = posix_spawnattr_setsigmask(&attr, &none);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = -1;
  if (rc == 0) {
    SlowCall timed("spawning a helper process");
    rc = posix_spawn(&pid, spec.file.c_str(), &actions, &attr, exec.argv.data(), exec.env.data());
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return make_error("spawn_failed", fmt::format("{}: {}", spec.file, std::strerror(rc)));
  return pid;
}

}  // namespace

Expected<std::unique_ptr<ChildProcess>> ChildProcess::spawn(uv_loop_t* loop, const ChildSpec& spec, Done done) {
  // Without an account to switch to, the child shares the runner's memory until its exec: libuv
  // 1.44's uv_spawn forks, which copies the runner's page tables, 5-9 ms of the loop per helper
  // on this host (a workspace's checkout, the scan after each of its jobs). With an account,
  // uv_spawn: posix_spawn has no setuid.
  if (!spec.uid && !spec.gid) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return make_error("spawn_failed", spec.file + ": pipe: " + std::strerror(errno));
    UniqueFd out_read(out[0]), out_write(out[1]);
    if (pipe2(err, O_CLOEXEC) != 0) return make_error("spawn_failed", spec.file + ": pipe: " + std::strerror(errno));
    UniqueFd err_read(err[0]), err_write(err[1]);
    auto pid = spawn_sharing_memory(spec, out_write.get(), err_write.get());
    if (!pid) return pid.error();
    out_write.reset();
    err_write.reset();
    UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, *pid, 0)));
    auto child = pidfd ? adopt(loop, *pid, std::move(pidfd), std::move(out_read), std::move(err_read), spec.timeout_ms,
                               spec.max_stdout_bytes, std::move(done))
                       : Expected<std::unique_ptr<ChildProcess>>(make_error("spawn_failed", spec.file + ": pidfd_open: " + std::strerror(errno)));
    if (!child) {
      // Nothing watches it: it is killed and reaped here (it dies at once).
      ::kill(*pid, SIGKILL);
      (void)waitpid(*pid, nullptr, 0);
    }
    return child;
  }
  auto* w = new Watch;
  w->result.max_stdout_bytes = spec.max_stdout_bytes;
  if (!w->track(uv_pipe_init(loop, &w->out, 0), &w->out) || !w->track(uv_pipe_init(loop, &w->err, 0), &w->err) ||
      !w->track(uv_timer_init(loop, &w->timer), &w->timer)) {
    w->close_all();
    return make_error("spawn_failed", spec.file + ": the loop could not make its pipes or timer");
  }

  ExecVectors exec(spec);
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  if (spec.stdin_fd >= 0) {
    stdio[0].flags = UV_INHERIT_FD;
    stdio[0].data.fd = spec.stdin_fd;
  }
  stdio[1].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
  stdio[1].data.stream = reinterpret_cast<uv_stream_t*>(&w->out);
  stdio[2].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
  stdio[2].data.stream = reinterpret_cast<uv_stream_t*>(&w->err);
  uv_process_options_t opts{};
  opts.file = spec.file.c_str();
  opts.args = exec.argv.data();
  opts.env = exec.env.data();
  opts.cwd = spec.cwd.c_str();
  opts.stdio = stdio;
  opts.stdio_count = 3;
  if (spec.uid) {
    opts.flags |= UV_PROCESS_SETUID;
    opts.uid = *spec.uid;
  }
  if (spec.gid) {
    opts.flags |= UV_PROCESS_SETGID;
    opts.gid = *spec.gid;
  }
  opts.exit_cb = [](uv_process_t* p, int64_t status, int sig) {
    static_cast<Watch*>(p->data)->on_exit(sig ? -1 : static_cast<int>(status), sig);
  };
  const int rc = [&] {
    SlowCall timed("spawning a helper process");
    return uv_spawn(loop, &w->process, &opts);
  }();
  w->initialized(&w->process);  // libuv wants it closed even after a failed spawn
  if (rc != 0) {
    w->close_all();
    return make_error("spawn_failed", fmt::format("{}: {}", spec.file, uv_strerror(rc)));
  }
  w->start_reading(&w->out);
  w->start_reading(&w->err);
  w->start_deadline(spec.timeout_ms);
  std::unique_ptr<ChildProcess> child(new ChildProcess);
  child->watch_ = w;
  child->pid_ = w->process.pid;
  w->owner = child.get();
  w->done = std::move(done);
  return child;
}

Expected<std::unique_ptr<ChildProcess>> ChildProcess::adopt(uv_loop_t* loop, pid_t pid, UniqueFd pidfd, UniqueFd stdout_read,
                                                            UniqueFd stderr_read, uint64_t timeout_ms, size_t max_stdout_bytes,
                                                            Done done) {
  auto* w = new Watch;
  w->result.max_stdout_bytes = max_stdout_bytes;
  w->pidfd = std::move(pidfd);
  w->pid = pid;
  if (int rc = uv_timer_init(loop, &w->timer); !w->track(rc, &w->timer)) {
    w->close_all();
    return make_error("io", fmt::format("the deadline of {}: {}", pid, uv_strerror(rc)));
  }
  if (int rc = uv_poll_init(loop, &w->pidfd_poll, w->pidfd.get()); !w->track(rc, &w->pidfd_poll)) {
    w->close_all();
    return make_error("io", fmt::format("watching the pidfd of {}: {}", pid, uv_strerror(rc)));
  }
  std::pair<uv_pipe_t*, UniqueFd*> pipes[] = {{&w->out, &stdout_read}, {&w->err, &stderr_read}};
  for (auto& [pipe, fd] : pipes) {
    if (!*fd) continue;
    int rc = uv_pipe_init(loop, pipe, 0);
    if (w->track(rc, pipe)) rc = uv_pipe_open(pipe, fd->get());
    if (rc != 0) {
      w->close_all();
      return make_error("io", fmt::format("reading the output of {}: {}", pid, uv_strerror(rc)));
    }
    fd->release();  // the pipe handle closes it now
    w->start_reading(pipe);
  }
  if (int rc = uv_poll_start(&w->pidfd_poll, UV_READABLE, [](uv_poll_t* h, int, int) { static_cast<Watch*>(h->data)->reap(); });
      rc != 0) {
    w->close_all();  // the caller still owns the child's pid: it kills it (the pidfd is closed here)
    return make_error("io", fmt::format("watching the pidfd of {}: {}", pid, uv_strerror(rc)));
  }
  w->start_deadline(timeout_ms);
  std::unique_ptr<ChildProcess> child(new ChildProcess);
  child->watch_ = w;
  child->pid_ = pid;
  w->owner = child.get();
  w->done = std::move(done);
  return child;
}

void ChildProcess::run_detached(uv_loop_t* loop, const ChildSpec& spec, std::function<void(Expected<ChildExit>)> done) {
  auto child = spawn(loop, spec, [done](ChildExit e) { done(std::move(e)); });
  if (!child) return done(child.error());
  (*child)->watch_->owner = nullptr;  // the watch goes on alone and reports when it ends
  (*child)->watch_ = nullptr;
}

void ChildProcess::stream_stdout(std::function<void(std::string_view)> chunk) {
  if (watch_) watch_->on_stdout = std::move(chunk);
}

void ChildProcess::before_reap(std::function<void(pid_t)> peek) {
  if (watch_) watch_->before_reap = std::move(peek);
}

void ChildProcess::kill() {
  if (watch_) watch_->kill();
}

ChildProcess::~ChildProcess() {
  if (!watch_) return;
  watch_->owner = nullptr;
  watch_->done = nullptr;
  watch_->before_reap = nullptr;
  watch_->kill();
}

}  // namespace motor::reactor
