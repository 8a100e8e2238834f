#include "sandbox/sandboxed_child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "reactor/slow_call.hpp"
#include "sandbox/pipestatus.hpp"

namespace motor::sandbox {

SandboxedChild::SandboxedChild(uv_loop_t* loop, Watch watch, Events events)
    : loop_(loop), watch_(std::move(watch)), events_(std::move(events)) {}

std::unique_ptr<SandboxedChild> SandboxedChild::start(uv_loop_t* loop, Starter& starter, const SandboxConfig& box,
                                                      const SpawnSpec& spec, Watch watch, Events events) {
  std::unique_ptr<SandboxedChild> self(new SandboxedChild(loop, std::move(watch), std::move(events)));
  starter.spawn(box, spec, [loop, raw = self.get(), alive = self->alive_](Expected<SpawnedProcess> spawned) {
    if (*alive) return raw->on_spawned(std::move(spawned));
    // Dropped before the starter answered: the child is killed now and reaped on the loop.
    if (spawned) {
      auto orphan = reactor::ChildProcess::adopt(loop, spawned->pid, std::move(spawned->pidfd), UniqueFd(), UniqueFd(), 0, 0,
                                                 nullptr);
      if (!orphan) ::kill(spawned->pid, SIGKILL);  // unwatched: a zombie until this process reaps or exits
    }
  });
  return self;
}

SandboxedChild::~SandboxedChild() {
  *alive_ = false;
  setup_poll_.close();
  child_.reset();  // a child still running is killed, and reaped on the loop
}

void SandboxedChild::on_spawned(Expected<SpawnedProcess> spawned) {
  if (!spawned) {
    if (auto failed = std::move(events_.start_failed)) failed(spawned.error());  // may destroy this
    return;
  }
  pid_ = spawned->pid;
  spawn_times_ = spawned->times;
  setup_status_ = std::move(spawned->setup_status);
  fcntl(setup_status_.get(), F_SETFL, O_NONBLOCK);
  mount_ns_ = std::move(spawned->mount_ns);  // a sandbox built ahead: for its late binds
  auto child = reactor::ChildProcess::adopt(loop_, pid_, std::move(spawned->pidfd), std::move(watch_.stdout_read),
                                            std::move(watch_.stderr_read), watch_.timeout_ms, watch_.max_stdout_bytes,
                                            [this](reactor::ChildExit e) { on_exit(std::move(e)); });
  if (!child) {
    // Unwatched it could not be followed: killed, reaped here (it dies at once), and refused.
    ::kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, __WALL) < 0 && errno == EINTR) {
    }
    if (auto failed = std::move(events_.start_failed)) failed(child.error());  // may destroy this
    return;
  }
  child_ = std::move(*child);
  if (watch_.stream_stdout) child_->stream_stdout(std::move(watch_.stream_stdout));
  child_->before_reap([this](pid_t pid) {  // motor-init's name, read before the reap frees the pid
    auto report = read_init_report(pid);
    init_signal_ = report.signal;
    init_pipestatus_ = std::move(report.pipestatus);
  });
  // Without the poll the status is read at exit (or at the first output): only `execd` is later.
  if (setup_poll_.init(this, uv_poll_init, loop_, setup_status_.get()) == 0 &&
      uv_poll_start(setup_poll_.get(), UV_READABLE | UV_DISCONNECT, [](uv_poll_t* h, int, int) {
        if (auto* self = reactor::owner_of<SandboxedChild>(h)) self->read_setup_status();
      }) != 0) {
    setup_poll_.close();
  }
  if (kill_wanted_) child_->kill();
  if (events_.spawned) events_.spawned(pid_);  // may destroy this
}

void SandboxedChild::check_setup() { read_setup_status(); }

void SandboxedChild::rebind(Events events) { events_ = std::move(events); }

void SandboxedChild::read_setup_status() {
  if (setup_known_ || !setup_status_) return;
  char buf[512];
  const ssize_t n = ::read(setup_status_.get(), buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;  // neither exec'd nor failed yet
  setup_known_ = true;
  setup_poll_.close();
  setup_status_.reset();
  if (n > 0) {
    setup_failure_.assign(buf, static_cast<size_t>(n));
    return;
  }
  // EOF: the pipe's write end closed at exec, or as the child died before it. After our kill it
  // is not known which (a dying process closes its fds before waitid can see it gone): not
  // reported as exec'd.
  if (kill_wanted_) return;
  execd_ = true;
  if (events_.execd) events_.execd();
}

void SandboxedChild::on_exit(reactor::ChildExit exit) {
  reactor::SlowCall timed("a sandbox's init exited", reactor::SlowCall::kTraceOnly);
  mount_ns_.reset();  // nothing is mounted into a sandbox that is gone; a finished job holds no fd
  read_setup_status();
  SandboxedExit out;
  out.wait_status = exit.exit_code >= 0 ? W_EXITCODE(exit.exit_code, 0) : exit.term_signal;
  if (init_signal_ && WIFEXITED(out.wait_status) && WEXITSTATUS(out.wait_status) == 128 + init_signal_) {
    out.wait_status = init_signal_;
  }
  out.init_pipestatus = std::move(init_pipestatus_);
  out.child = std::move(exit);
  out.setup_failure = setup_failure_;
  out.execd = execd_;
  out.killed_before_exec = !execd_ && setup_failure_.empty() && kill_wanted_;
  if (auto exited = std::move(events_.exited)) exited(std::move(out));  // may destroy this
}

void SandboxedChild::kill() {
  kill_wanted_ = true;
  if (child_) child_->kill();
}

}  // namespace motor::sandbox
