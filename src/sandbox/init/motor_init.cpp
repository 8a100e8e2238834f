// motor-init: PID 1 of a Linux job's PID namespace (DESIGN.md "A Linux job", issue 3).
//
//   motor-init [--test-keep-dumpable] [--pipestatus] [--gate] [--] COMMAND [ARG...]
//   motor-init [--test-keep-dumpable] --await-command
//
// Starts COMMAND (posix_spawnp: PATH lookup as execvp, and a file with no executable format runs
// under /bin/sh as execvp runs it), reaps every process that is re-parented to
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
// `--pipestatus`: COMMAND is the runner's `bash -c` with an EXIT trap that writes its last
// pipeline's statuses to fd 254, a pipe only motor-init reads (init_report.hpp); when COMMAND
// exits, a valid report that fits becomes motor-init's name ("|0|1"), which the runner reads as
// it reads the signal's. Nothing in it changes the exit code.
// `--gate`: fd 0 is a pipe from the runner, which builds the sandbox while the job's record is
// being saved; COMMAND runs only once the runner writes "g" there (the job is on record). At EOF
// (the record failed, or the runner died) motor-init exits kGateShutExit and runs nothing. Then
// fd 0 becomes /dev/null, as the runner gives every job (the pipe, at EOF, if that cannot open).
// `--await-command`: a sandbox built ahead of its job (runner/sandbox_pool.hpp). Fd 0 is the
// runner's pipe, which brings the whole command once the job is on record and its workspace is
// mounted: "c", a 4-byte length (host order), then NUL-terminated fields: the argument count, the
// environment's count, the working directory, motor-init's arguments ([--pipestatus] [--]
// COMMAND [ARG...]) and the environment. motor-init enters that directory (the workspace was
// mounted over the one it started in), takes that environment as its own (posix_spawnp's PATH
// search reads it) and goes on as if started with those arguments. At EOF, or anything
// malformed, it exits kGateShutExit and runs nothing; then fd 0 becomes /dev/null.
// It execs nothing but COMMAND, holds no state of the runner, and is linked statically so it
// needs nothing from the job's root but its own file. Exit 127: COMMAND not found or motor-init
// could not start it; 126: COMMAND not executable.
#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>

#include "init_report.hpp"  // this directory: motor-init is built on its own

extern char** environ;

namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

void say(const char* what, const char* detail) {
  std::fprintf(stderr, "motor-init: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

namespace report = motor::sandbox::init_report;

// The shell's report pipe: the read end stays here (close-on-exec, non-blocking); the child puts
// the write end at report::kPipestatusFd. False (and no report) if it cannot be made.
struct ReportPipe {
  int read_end = -1;
  int write_end = -1;
};

bool open_report_pipe(ReportPipe& p) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  // Neither end may sit on the fd the child's write end goes to.
  for (int& fd : fds) {
    if (fd != report::kPipestatusFd) continue;
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    fd = moved;
  }
  p.read_end = fds[0];
  p.write_end = fds[1];
  return p.read_end >= 0 && p.write_end >= 0;
}

// After the shell exited: what it left in the pipe (more than kMaxShellReport bytes is garbage),
// as our name if it is a valid report that fits.
void name_after_report(int read_end) {
  char buf[report::kMaxShellReport + 1];
  std::size_t have = 0;
  for (;;) {
    const ssize_t n = read(read_end, buf + have, sizeof buf - have);
    if (n > 0) {
      have += static_cast<std::size_t>(n);
      if (have == sizeof buf) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF, or EAGAIN: what a process the job left behind still holds open is not read
  }
  report::Statuses statuses;
  char name[report::kMaxName + 1];
  if (report::parse_shell_report(std::string_view(buf, have), statuses) && report::format_name(statuses, name)) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
  }
}

int g_report_fd = -1;  // the report pipe's read end, when --pipestatus

[[noreturn]] void exit_like(int status) {
  if (WIFEXITED(status)) {
    if (g_report_fd >= 0) name_after_report(g_report_fd);
    std::_Exit(WEXITSTATUS(status));
  }
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

// Starts COMMAND with an empty signal mask, the report pipe's write end (if any) at
// report::kPipestatusFd: posix_spawnp, which glibc runs with CLONE_VM | CLONE_VFORK, so that
// neither this process nor the child copies page tables or takes copy-on-write faults, as a fork
// made both do. Returns the child's pid, or -errno (-ENOEXEC: the file has no executable format,
// which execvp, unlike posix_spawnp, runs under /bin/sh: the caller forks for that).
pid_t spawn_command(char** command, int report_write_end, const sigset_t& mask) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  if (posix_spawn_file_actions_init(&actions) != 0) return -ENOMEM;
  if (posix_spawnattr_init(&attributes) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return -ENOMEM;
  }
  int rc = 0;
  if (report_write_end >= 0) rc = posix_spawn_file_actions_adddup2(&actions, report_write_end, report::kPipestatusFd);
  if (rc == 0) rc = posix_spawnattr_setsigmask(&attributes, &mask);
  if (rc == 0) rc = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  if (rc == 0) rc = posix_spawnp(&pid, command[0], &actions, &attributes, command, environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -rc;
}

struct Options {
  int first = 1;  // COMMAND's index in argv
  bool keep_dumpable = false;
  bool pipestatus = false;
  bool gate = false;
  bool await_command = false;
};

// What motor-init exits with when the runner closed the gate without letting COMMAND run.
constexpr int kGateShutExit = 125;

// Reads exactly `size` bytes from fd 0. False at EOF or on an error.
bool read_gate(void* into, std::size_t size) {
  auto* at = static_cast<char*>(into);
  while (size > 0) {
    const ssize_t n = read(STDIN_FILENO, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Once the gate is passed: fd 0 is /dev/null, as the runner gives every job.
void stdin_from_dev_null() {
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);  // dup2 clears close-on-exec on fd 0
    close(null);
  }
}

// --gate: waits for the runner's "g" on fd 0. False: the gate was shut (EOF, or anything else).
bool pass_gate() {
  char go = 0;
  if (!read_gate(&go, 1) || go != 'g') return false;
  stdin_from_dev_null();
  return true;
}

// The most a command message may hold (the runner sends far less: it fits the pipe).
constexpr uint32_t kMaxCommandMessage = 1u << 20;

// A field of the message: the NUL-terminated string at `at`, which then moves past it. Null if
// the message ends first.
char* next_field(char*& at, char* end) {
  char* field = at;
  char* nul = static_cast<char*>(std::memchr(at, '\0', static_cast<std::size_t>(end - at)));
  if (!nul) return nullptr;
  at = nul + 1;
  return field;
}

std::size_t field_count(const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long n = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || n > kMaxCommandMessage) return SIZE_MAX;
  return n;
}

// --await-command: the command message (see the top of this file). On success `argv` and
// `environ` point into the message, which is never freed; the working directory is entered.
// False: the gate was shut or the message malformed (nothing runs).
bool await_command(int& argc, char**& argv) {
  char kind = 0;
  uint32_t size = 0;
  if (!read_gate(&kind, 1) || kind != 'c' || !read_gate(&size, sizeof size) || size > kMaxCommandMessage) return false;
  char* message = static_cast<char*>(std::malloc(size + 1u));
  if (!message || !read_gate(message, size)) return false;
  stdin_from_dev_null();
  char* at = message;
  char* const end = message + size;
  const char* argc_text = next_field(at, end);
  const char* envc_text = argc_text ? next_field(at, end) : nullptr;
  const char* cwd = envc_text ? next_field(at, end) : nullptr;
  if (!cwd) return false;
  const std::size_t count = field_count(argc_text);
  const std::size_t env_count = field_count(envc_text);
  if (count == SIZE_MAX || env_count == SIZE_MAX) return false;
  // argv[0] is our own name; then the message's arguments, then a null.
  auto** args = static_cast<char**>(std::calloc(count + 2, sizeof(char*)));
  auto** env = static_cast<char**>(std::calloc(env_count + 1, sizeof(char*)));
  if (!args || !env) return false;
  args[0] = argv[0];
  for (std::size_t i = 0; i < count; ++i) {
    if (!(args[i + 1] = next_field(at, end))) return false;
  }
  for (std::size_t i = 0; i < env_count; ++i) {
    if (!(env[i] = next_field(at, end))) return false;
  }
  if (at != end) return false;
  if (chdir(cwd) != 0) {
    std::fprintf(stderr, "motor-init: cannot enter the working directory %s: %s\n", cwd, std::strerror(errno));
    std::_Exit(127);
  }
  environ = env;
  argc = static_cast<int>(count + 1);
  argv = args;
  return true;
}

// The options, in any order, then an optional "--".
Options parse_options(int argc, char** argv) {
  Options o;
  for (; argc > o.first; ++o.first) {
    if (std::strcmp(argv[o.first], "--test-keep-dumpable") == 0) {
      o.keep_dumpable = true;
    } else if (std::strcmp(argv[o.first], "--pipestatus") == 0) {
      o.pipestatus = true;
    } else if (std::strcmp(argv[o.first], "--gate") == 0) {
      o.gate = true;
    } else if (std::strcmp(argv[o.first], "--await-command") == 0) {
      o.await_command = true;
    } else {
      break;
    }
  }
  if (argc > o.first && std::strcmp(argv[o.first], "--") == 0) ++o.first;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse_options(argc, argv);
  if (!options.keep_dumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    say("PR_SET_DUMPABLE", std::strerror(errno));
    return 127;
  }
  if (options.await_command) {
    if (options.first != argc || !await_command(argc, argv)) return kGateShutExit;
    // The message's own options; whether we stay dumpable was settled above, before any wait.
    const bool keep_dumpable = options.keep_dumpable;
    options = parse_options(argc, argv);
    options.keep_dumpable = keep_dumpable;
    if (options.gate || options.await_command) {
      say("the command message may not ask for a gate", nullptr);
      return 127;
    }
  }
  const int first = options.first;
  if (first >= argc) {
    say("usage: motor-init [--test-keep-dumpable] [--pipestatus] [--gate] [--] COMMAND [ARG...]", nullptr);
    return 127;
  }
  if (options.gate && !pass_gate()) return kGateShutExit;
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

  ReportPipe pipe_ends;
  if (options.pipestatus && !open_report_pipe(pipe_ends)) say("no pipestatus report pipe", std::strerror(errno));
  pid_t child = spawn_command(argv + first, pipe_ends.write_end, none);
  if (child == -ENOEXEC) {
    child = fork();  // no executable format: execvp below runs it under /bin/sh
    if (child < 0) {
      say("fork", std::strerror(errno));
      return 127;
    }
  } else if (child < 0) {
    std::fprintf(stderr, "motor-init: cannot execute %s: %s\n", argv[first], std::strerror(-child));
    return -child == ENOENT || -child == ENOTDIR ? 127 : 126;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // dup2 leaves the new fd without close-on-exec; both originals close on exec.
    if (pipe_ends.write_end >= 0) dup2(pipe_ends.write_end, report::kPipestatusFd);
    execvp(argv[first], argv + first);
    const int err = errno;
    std::fprintf(stderr, "motor-init: cannot execute %s: %s\n", argv[first], std::strerror(err));
    std::_Exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
  }

  if (pipe_ends.write_end >= 0) close(pipe_ends.write_end);
  g_report_fd = pipe_ends.read_end;

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
