#include "sandbox/spawn.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"

namespace motor::sandbox {
namespace {

// Reports a failed step to the parent through the status pipe and exits before exec.
[[noreturn]] void child_fail(int status_fd, const char* stage, int err) {
  char buf[256];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s && n < sizeof buf) buf[n++] = *s++;
  };
  put(stage);
  put(": ");
  put(strerrordesc_np(err) ? strerrordesc_np(err) : "unknown error");
  ssize_t ignored = ::write(status_fd, buf, n);
  (void)ignored;
  _exit(127);
}

[[noreturn]] void run_child(const SpawnSpec& spec, char* const* argv, char* const* envp, const char* exec_stage,
                            int status_fd) {
  // The runner ignores SIGPIPE and may block signals; the job starts with defaults.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);

  for (int fd : spec.cgroup->child_attach_fds()) {
    if (::write(fd, "0", 1) != 1) child_fail(status_fd, "joining the job's cgroup", errno);
  }
  // A session of its own: the job never gets the runner's terminal or process group signals.
  if (setsid() < 0) child_fail(status_fd, "setsid", errno);
  if (dup2(spec.stdin_fd, 0) < 0 || dup2(spec.stdout_fd, 1) < 0 || dup2(spec.stderr_fd, 2) < 0) {
    child_fail(status_fd, "setting up stdio", errno);
  }
  // Close everything else but the status pipe (close-on-exec).
  if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) < 0) child_fail(status_fd, "close_range", errno);

  const char* stage = "sandbox";
  if (spec.hooks && spec.hooks->before_credentials) {
    if (int err = spec.hooks->before_credentials(stage); err != 0) child_fail(status_fd, stage, err);
  }
  if (chdir(spec.cwd.c_str()) < 0) child_fail(status_fd, "entering the working directory", errno);
  if (!control_weakened("job-account")) {  // test build only: the job stays uid 0 (capabilities still go)
    if (setgroups(1, &spec.gid) < 0) child_fail(status_fd, "setgroups", errno);
    if (setresgid(spec.gid, spec.gid, spec.gid) < 0) child_fail(status_fd, "setresgid", errno);
    if (setresuid(spec.uid, spec.uid, spec.uid) < 0) child_fail(status_fd, "setresuid", errno);
  }
  if (spec.hooks && spec.hooks->after_credentials) {
    if (int err = spec.hooks->after_credentials(stage); err != 0) child_fail(status_fd, stage, err);
  }
  execve(spec.executable.c_str(), argv, envp);
  child_fail(status_fd, exec_stage, errno);
}

}  // namespace

Expected<SpawnedProcess> spawn_job(const SpawnSpec& spec) {
  if (!spec.cgroup) return make_error("internal", "spawn_job needs the job's cgroup");
  if (spec.uid == 0) return make_error("internal", "refusing to run a job as root");
  if (spec.argv.empty()) return make_error("internal", "spawn_job needs argv");

  // Everything the child needs is built before the clone; the child only makes system calls.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // "exec: PATH": the runner reports a command that cannot be run the way a shell does.
  const std::string exec_stage = "exec: " + spec.executable;

  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd status_read(status_pipe[0]), status_write(status_pipe[1]);

  int pidfd = -1;
  clone_args args{};
  args.flags = CLONE_PIDFD | (spec.hooks ? spec.hooks->clone_flags : 0);
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (spec.cgroup->clone_into_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(spec.cgroup->clone_into_fd());
  }
  const long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0) return sys_error("clone3");
  if (pid == 0) run_child(spec, argv.data(), envp.data(), exec_stage.c_str(), status_write.get());

  SpawnedProcess out;
  out.pid = static_cast<pid_t>(pid);
  out.pidfd = UniqueFd(pidfd);
  out.setup_status = std::move(status_read);
  return out;
}

Expected<int> reap_pidfd(int pidfd) {
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG) < 0) {
    return sys_error("waitid");
  }
  if (info.si_pid == 0) return make_error("io", "the job has not exited yet");
  if (info.si_code == CLD_EXITED) return W_EXITCODE(info.si_status, 0);
  return info.si_status & 0x7f;  // killed or dumped: the signal number, as WTERMSIG reads it
}

}  // namespace motor::sandbox
