// motor-init: PID 1 of a Linux job's PID namespace (DESIGN.md "A Linux job", issue 3).
//
//   motor-init [--] COMMAND [ARG...]
//
// Forks and execs COMMAND (PATH lookup as execvp), reaps every process that is re-parented to
// it, forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT (and SIGUSR1, SIGUSR2, SIGWINCH) to COMMAND, and
// exits when COMMAND exits: with its exit code, or 128+N if signal N killed it (a PID-namespace
// init cannot re-raise a fatal signal on itself; outside one, the signal is re-raised). So that
// the runner can tell that from a command that exited 128+N, it first names itself
// "motor-init:sN" (PR_SET_NAME); the runner reads that name from the exited, not yet reaped init
// (sandbox::init_reported_signal). Only the process itself can set its name. Its exit
// ends the PID namespace and so kills whatever the job left behind.
// It makes itself non-dumpable first (PR_SET_DUMPABLE 0): the job runs as the same account, and
// without it a job could open /proc/1/mem for writing (ptrace is refused by seccomp, /proc/PID/mem
// is not) and rewrite motor-init, or forge the signal report above. COMMAND is dumpable again
// after its execve. `--test-keep-dumpable` (only the test build's runner passes it:
// --test-weaken=init-nondumpable) leaves that out.
// It execs nothing but COMMAND, holds no state of the runner, and is linked statically so it
// needs nothing from the job's root but its own file. Exit 127: COMMAND not found or motor-init
// could not start it; 126: COMMAND not executable.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

void say(const char* what, const char* detail) {
  std::fprintf(stderr, "motor-init: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

[[noreturn]] void exit_like(int status) {
  if (WIFEXITED(status)) std::_Exit(WEXITSTATUS(status));
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  if (getpid() != 1) {  // not a namespace init: die the same way, so the parent sees the signal
    std::signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(sig);
  }
  char name[16];
  std::snprintf(name, sizeof name, "motor-init:s%d", sig);
  prctl(PR_SET_NAME, name, 0, 0, 0);
  std::_Exit(128 + sig);
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  if (argc > first && std::strcmp(argv[first], "--test-keep-dumpable") == 0) {
    ++first;
  } else if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    say("PR_SET_DUMPABLE", std::strerror(errno));
    return 127;
  }
  if (argc > first && std::strcmp(argv[first], "--") == 0) ++first;
  if (first >= argc) {
    say("usage: motor-init [--] COMMAND [ARG...]", nullptr);
    return 127;
  }
  // Orphans must come to us even when we are not PID 1 (a job run without a PID namespace).
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    say("PR_SET_CHILD_SUBREAPER", std::strerror(errno));
    return 127;
  }
  // The command starts with default dispositions (the runner may have ignored SIGPIPE) and an
  // empty mask; we take every signal synchronously.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) std::signal(sig, SIG_DFL);
  }
  sigset_t all;
  sigset_t none;
  sigfillset(&all);
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &all, nullptr) != 0) {
    say("sigprocmask", std::strerror(errno));
    return 127;
  }

  const pid_t child = fork();
  if (child < 0) {
    say("fork", std::strerror(errno));
    return 127;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[first], argv + first);
    const int err = errno;
    std::fprintf(stderr, "motor-init: cannot execute %s: %s\n", argv[first], std::strerror(err));
    std::_Exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
  }

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  for (int sig : kForwarded) sigaddset(&wanted, sig);

  for (;;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&wanted, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      say("sigwaitinfo", std::strerror(errno));
      kill(child, SIGKILL);
      return 127;
    }
    if (sig != SIGCHLD) {
      kill(child, sig);  // ESRCH (already gone) is fine: SIGCHLD is on its way
      continue;
    }
    // Reap everything that is ready: the command and any orphan re-parented to us.
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      if (pid == child) exit_like(status);
    }
  }
}
