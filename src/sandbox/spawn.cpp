#include "sandbox/spawn.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "motor/fd_message.hpp"
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

// The clone3 made the mount namespace: the host's /proc still names it /proc/self/ns/mnt. System
// calls only (this child may share the caller's memory).
int report_mount_namespace(int sock) {
  const int ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (ns < 0) return errno;
  FdMessage m;
  m.carry(ns);
  const int err = sendmsg(sock, &m.msg, MSG_NOSIGNAL) == 1 ? 0 : errno;
  close(ns);
  return err;
}

[[noreturn]] void run_child(const SpawnSpec& spec, char* const* argv, char* const* envp, const char* exec_stage,
                            int status_fd) {
  ChildStamps* stamps = spec.hooks ? spec.hooks->stamps.get() : nullptr;
  if (stamps) stamps->started = monotonic_ns();
  // The runner ignores SIGPIPE and may block signals; the job starts with defaults. Handlers
  // go first: the parent blocked every signal around the clone, so none of its handlers can
  // run here (with CLONE_VM it would run on the parent's memory).
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (spec.hooks && spec.hooks->mount_ns_report_fd >= 0) {
    if (int err = report_mount_namespace(spec.hooks->mount_ns_report_fd); err != 0) {
      child_fail(status_fd, "sending our mount namespace to the starter", err);
    }
  }

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
  // The job starter is SCHED_BATCH (base/cpu_policy.hpp) and its sandbox's setup above ran so;
  // the job itself runs under the default policy, as any process would (nice kept). The call
  // itself, not base's: this child shares the starter's memory until its exec, and an error
  // there would allocate.
  const sched_param normal{};
  if (sched_setscheduler(0, SCHED_OTHER, &normal) != 0) child_fail(status_fd, "restoring SCHED_OTHER", errno);
  if (chdir(spec.cwd.c_str()) < 0) child_fail(status_fd, "entering the working directory", errno);
  if (!control_weakened("job-account")) {  // test build only: the job stays uid 0 (capabilities still go)
    const bool groups_settable = !(spec.hooks && spec.hooks->own_user_namespace);
    if (groups_settable && setgroups(1, &spec.gid) < 0) child_fail(status_fd, "setgroups", errno);
    if (setresgid(spec.gid, spec.gid, spec.gid) < 0) child_fail(status_fd, "setresgid", errno);
    if (setresuid(spec.uid, spec.uid, spec.uid) < 0) child_fail(status_fd, "setresuid", errno);
  }
  // Set after the uid change, which clears it.
  if (spec.die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) child_fail(status_fd, "PR_SET_PDEATHSIG", errno);
  if (spec.hooks && spec.hooks->after_credentials) {
    if (int err = spec.hooks->after_credentials(stage); err != 0) child_fail(status_fd, stage, err);
  }
  if (stamps) stamps->ready = monotonic_ns();
  if (spec.hooks && spec.hooks->exec_fd >= 0) {
    syscall(SYS_execveat, spec.hooks->exec_fd, "", argv, envp, AT_EMPTY_PATH);
  } else {
    execve(spec.executable.c_str(), argv, envp);
  }
  child_fail(status_fd, exec_stage, errno);
}

struct ChildStart {
  const SpawnSpec* spec;
  char* const* argv;
  char* const* envp;
  const char* exec_stage;
  int status_fd;
};

[[noreturn]] void child_entry(void* start) {
  const auto* c = static_cast<const ChildStart*>(start);
  run_child(*c->spec, c->argv, c->envp, c->exec_stage, c->status_fd);
}

#if defined(__x86_64__)
constexpr size_t kChildStackBytes = size_t{512} << 10;

// The stack a CLONE_VM child runs on: one per process, mapped once (spawns through the job
// starter are one at a time, and the caller is suspended until the child has exec'd).
char* child_stack() {
  static char* top = [] {
    void* m = mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return static_cast<char*>(nullptr);
    (void)mprotect(m, 4096, PROT_NONE);  // guard page
    return static_cast<char*>(m);
  }();
  return top;
}

// clone3 whose child calls entry(arg) on its new stack and never returns into this frame: it
// shares our memory, so unwinding our stack would corrupt the parent's.
long clone3_calling(clone_args* args, void (*entry)(void*), void* arg) {
  long ret;
  register void (*fn)(void*) asm("r12") = entry;
  register void* fn_arg asm("r13") = arg;
  asm volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xor %%ebp, %%ebp\n\t"
      "mov %%r13, %%rdi\n\t"
      "call *%%r12\n\t"
      "mov $60, %%eax\n\t"  // exit(127): entry never returns, but never fall through
      "mov $127, %%edi\n\t"
      "syscall\n\t"
      "1:\n\t"
      : "=a"(ret)
      : "0"(static_cast<long>(SYS_clone3)), "D"(args), "S"(sizeof *args), "r"(fn), "r"(fn_arg)
      : "rcx", "r11", "memory");
  return ret;
}
#endif

}  // namespace

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

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
  // With CLONE_PARENT the exit signal is the caller's own (SIGCHLD) and clone3 wants 0 here.
  args.exit_signal = spec.child_of_callers_parent ? 0 : SIGCHLD;
  if (spec.child_of_callers_parent) args.flags |= CLONE_PARENT;
  if (spec.cgroup->clone_into_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(spec.cgroup->clone_into_fd());
  }
  // No handler of ours may run in the child before it has reset them (see run_child).
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  long pid = -1;
  int clone_errno = 0;
#if defined(__x86_64__)
  if (spec.share_memory_until_exec && child_stack()) {
    ChildStart start{&spec, argv.data(), envp.data(), exec_stage.c_str(), status_write.get()};
    args.flags |= CLONE_VM | CLONE_VFORK;
    args.stack = reinterpret_cast<uint64_t>(child_stack());
    args.stack_size = kChildStackBytes;
    pid = clone3_calling(&args, child_entry, &start);
    if (pid < 0) {
      clone_errno = static_cast<int>(-pid);
      pid = -1;
    }
  } else
#endif
  {
    pid = syscall(SYS_clone3, &args, sizeof args);
    clone_errno = errno;
    if (pid == 0) run_child(spec, argv.data(), envp.data(), exec_stage.c_str(), status_write.get());
  }
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) return sys_error("clone3", clone_errno);

  SpawnedProcess out;
  out.pid = static_cast<pid_t>(pid);
  out.pidfd = UniqueFd(pidfd);
  out.setup_status = std::move(status_read);
  return out;
}

Expected<UniqueFd> receive_mount_namespace(int sock) {
  FdMessage m;
  ssize_t n;
  do {
    n = recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return sys_error("receiving the sandbox's mount namespace");
  UniqueFd ns(m.carried(n));
  if (!ns) return make_error("io", "the sandbox did not send its mount namespace");
  return ns;
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
