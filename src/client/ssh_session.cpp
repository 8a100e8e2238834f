#include "client/ssh_session.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "client/detached_helper.hpp"
#include "motor/sys_error.hpp"

namespace motor::client {
namespace {

constexpr std::string_view kExecFailed = "motor: cannot run ssh: ";
// How long an idle control master stays up for the next call.
constexpr const char* kControlPersist = "ControlPersist=300";

// The control socket's name: a hash of where it leads and how ssh is run, so that a different
// MOTOR_SSH_COMMAND (another config, another key) never rides a master made by the other one.
std::string control_name(const SshTarget& t, const std::string& ssh_command) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : fmt::format("{}@{}:{}\n{}", t.user, t.host, t.port, ssh_command)) {
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::vector<std::string> ssh_argv(const SshTarget& t, const std::string& ssh_command, const std::string& control_path,
                                  const std::vector<std::string>& tail, MasterUse master = MasterUse::kRideOrStart) {
  std::vector<std::string> argv;
  if (ssh_command.empty()) {
    argv = {"ssh"};
  } else if (ssh_command.find_first_of("|&;<>()$`\\\"'*?[]#~{}\n") == std::string::npos) {
    // Plain words, as git does for GIT_SSH_COMMAND: split and run directly, no shell between.
    for (size_t at = ssh_command.find_first_not_of(" \t"); at != std::string::npos;
         at = ssh_command.find_first_not_of(" \t", at)) {
      const size_t end = std::min(ssh_command.find_first_of(" \t", at), ssh_command.size());
      argv.push_back(ssh_command.substr(at, end - at));
      at = end;
    }
  } else {
    // Through the shell, our arguments appended; exec, so that ssh is our child (signals, exit).
    argv = {"/bin/sh", "-c", "exec " + ssh_command + " \"$@\"", "motor-ssh"};
  }
  // First value wins in ssh: options in MOTOR_SSH_COMMAND override these.
  for (const char* o : {"BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=15", "ServerAliveCountMax=3"}) {
    argv.insert(argv.end(), {"-o", o});
  }
  if (!control_path.empty() && master == MasterUse::kRideOnly) {
    // ControlMaster=no still logs in directly when no master answers; a ProxyCommand that fails
    // at once stops that (a session riding a master never runs it).
    argv.insert(argv.end(), {"-o", "ControlMaster=no", "-o", "ControlPath=" + control_path, "-o", "ProxyCommand=/bin/false"});
  } else if (!control_path.empty()) {
    argv.insert(argv.end(), {"-o", "ControlMaster=auto", "-o", "ControlPath=" + control_path, "-o", kControlPersist});
  }
  if (t.port != 0) argv.insert(argv.end(), {"-p", std::to_string(t.port)});
  if (!t.user.empty()) argv.insert(argv.end(), {"-l", t.user});
  argv.insert(argv.end(), tail.begin(), tail.end());
  return argv;
}

// Runs argv with stdin/stdout on `io` (or /dev/null) and stderr on `err` (or /dev/null), in a
// process group of its own (the terminal's Ctrl-C is the client's to handle: it cancels the job).
pid_t spawn(const std::vector<std::string>& args, int io, int err) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  setpgid(0, 0);
  const int null = ::open("/dev/null", O_RDWR);
  dup2(io >= 0 ? io : null, 0);
  dup2(io >= 0 ? io : null, 1);
  dup2(err >= 0 ? err : null, 2);
  execvp(argv[0], argv.data());
  const std::string why = fmt::format("{}{}: {}\n", kExecFailed, argv[0], std::strerror(errno));
  (void)!::write(2, why.data(), why.size());
  _exit(127);
}

// Waits for `pid` at most `limit`; then SIGTERM, then SIGKILL. Returns its wait status.
int wait_bounded(pid_t pid, std::chrono::milliseconds limit) {
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (bool terminated = false;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return status;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (terminated) {
        kill(pid, SIGKILL);
        return waitpid(pid, &status, 0) == pid ? status : 0;
      }
      kill(pid, SIGTERM);
      terminated = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

// The last line worth showing: ssh's informational chatter left out.
std::string last_line(const std::string& text) {
  std::string best;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && !line.starts_with("Warning: Permanently added")) best = line;
    start = end + 1;
  }
  return best.substr(0, 300);
}

}  // namespace

bool control_master_answers(const std::string& control_path, std::chrono::milliseconds limit) {
  constexpr uint32_t kHello = 0x00000001, kAliveCheck = 0x10000004, kAlive = 0x80000005, kVersion = 4, kRequest = 1;
  sockaddr_un addr{};
  if (!unix_address(control_path, addr)) return false;
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) return false;
  auto put = [](std::string& out, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  std::string out;
  for (uint32_t v : {8u, kHello, kVersion, 8u, kAliveCheck, kRequest}) put(out, v);
  if (::send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) return false;
  auto get = [](const std::string& in, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
    return v;
  };
  // The master's hello, then its answer: [len][type][request id][pid].
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string in;
  for (bool hello_seen = false;;) {
    if (in.size() >= 4 && in.size() >= 4 + size_t{get(in, 0)}) {
      const size_t len = get(in, 0);
      if (len < 4 || len > 4096) return false;
      const uint32_t type = get(in, 4);
      if (!hello_seen) {
        if (type != kHello) return false;
        hello_seen = true;
      } else {
        return type == kAlive && len >= 8 && get(in, 8) == kRequest;
      }
      in.erase(0, 4 + len);
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd.get(), POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) != 1) return false;
    char buf[512];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return false;
    in.append(buf, static_cast<size_t>(n));
  }
}

std::string control_socket_dir() {
  // ssh adds a 17-character suffix while it creates the socket; all of it must fit sun_path.
  return private_runtime_dir("motor-ssh", 1 + 16 + 17);
}

std::string SshSession::control_path_for(const SshTarget& target, const std::string& ssh_command) {
  const std::string dir = control_socket_dir();
  return dir.empty() ? "" : dir + "/" + control_name(target, ssh_command);
}

Expected<SshSession> SshSession::start(const SshTarget& target, const char* ssh_command, UniqueFd& socket,
                                       MasterUse master) {
  SshSession s;
  s.target_ = target;
  s.ssh_command_ = ssh_command ? ssh_command : "";
  s.control_path_ = control_path_for(target, s.ssh_command_);
  if (master == MasterUse::kRideOnly && s.control_path_.empty()) return make_error("unavailable", "no control socket directory");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  s.stderr_ = UniqueFd(memfd_create("motor-ssh-stderr", MFD_CLOEXEC));
  if (!s.stderr_) return sys_error("memfd_create");
  // -T: no terminal; -a, -x: nothing of the caller's forwarded. The command is what the key's
  // forced command expects (motor-runner connect checks it).
  const auto argv =
      ssh_argv(target, s.ssh_command_, s.control_path_, {"-T", "-a", "-x", "--", target.host, "motor-runner connect"}, master);
  s.pid_ = spawn(argv, theirs.get(), s.stderr_.get());
  if (s.pid_ < 0) return sys_error("fork");
  socket = std::move(mine);
  return s;
}

SshSession::SshSession(SshSession&& o) noexcept
    : target_(std::move(o.target_)), ssh_command_(std::move(o.ssh_command_)), control_path_(std::move(o.control_path_)),
      pid_(std::exchange(o.pid_, -1)), status_(o.status_), stderr_(std::move(o.stderr_)) {}

SshSession& SshSession::operator=(SshSession&& o) noexcept {
  if (this != &o) {
    reap(true);
    target_ = std::move(o.target_);
    ssh_command_ = std::move(o.ssh_command_);
    control_path_ = std::move(o.control_path_);
    pid_ = std::exchange(o.pid_, -1);
    status_ = o.status_;
    stderr_ = std::move(o.stderr_);
  }
  return *this;
}

SshSession::~SshSession() { reap(false); }

bool SshSession::exited() {
  if (pid_ <= 0) return true;
  const pid_t w = waitpid(pid_, &status_, WNOHANG);
  if (w == pid_ || (w < 0 && errno == ECHILD)) pid_ = -1;
  return pid_ <= 0;
}

void SshSession::reap(bool terminate) {
  if (pid_ <= 0) return;
  if (terminate) kill(pid_, SIGTERM);
  // Our end of the pair is closed by now: ssh sees EOF, closes the channel and exits.
  status_ = wait_bounded(pid_, std::chrono::milliseconds(terminate ? 500 : 2000));
  pid_ = -1;
}

std::string SshSession::stderr_text() const {
  std::string text(16384, '\0');
  const ssize_t n = pread(stderr_.get(), text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

Error SshSession::ended(bool runner_answered) {
  reap(false);
  const std::string text = stderr_text();
  std::string detail = last_line(text);
  const std::string& host = target_.host;
  if (contains(text, kExecFailed)) {
    return Error{"unavailable", fmt::format("{} (install openssh-client, or set MOTOR_SSH_COMMAND)", detail.substr(7))};
  }
  if (WIFSIGNALED(status_)) {
    return Error{"unreachable", fmt::format("lost the SSH session to {}: ssh was killed by signal {}", host, WTERMSIG(status_))};
  }
  const int code = WEXITSTATUS(status_);
  if (detail.empty()) detail = fmt::format("exit status {}", code);
  if (code == 255) {
    if (contains(text, "Permission denied") || contains(text, "Host key verification failed") ||
        contains(text, "Too many authentication failures") || contains(text, "No more authentication methods")) {
      return Error{kAuthRefused, fmt::format("{} refused this caller over SSH: {} (docs/remote-callers.md: caller set-up)", host, detail)};
    }
    if (runner_answered) return Error{"unreachable", fmt::format("lost the SSH connection to {}: {}", host, detail)};
    return Error{kHostUnreachable, fmt::format("cannot reach {} over SSH: {}; try again later", host, detail)};
  }
  if (runner_answered) return Error{"unreachable", fmt::format("the runner on {} closed the session ({})", host, detail)};
  if (contains(text, "motor-runner connect: cannot reach the runner")) {
    return Error{kRunnerDown, fmt::format("{} accepts SSH, but no runner answers behind it ({}); try again later", host, detail)};
  }
  return Error{kNotBridged,
               fmt::format("{} let this caller log in, but motor-runner connect did not answer ({}): the account needs "
                           "the forced command of conf/authorized_keys.example (docs/remote-callers.md)",
                           host, detail)};
}

bool SshSession::replace_dead_master() {
  struct stat st {};
  if (control_path_.empty() || ::lstat(control_path_.c_str(), &st) < 0) return false;
  const pid_t check = spawn(ssh_argv(target_, ssh_command_, control_path_, {"-O", "check", "--", target_.host}), -1, -1);
  if (check < 0) return false;
  const int status = wait_bounded(check, std::chrono::seconds(3));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return false;  // alive: the trouble is elsewhere
  ::unlink(control_path_.c_str());  // dead or stuck: the next session starts a new master
  return true;
}

}  // namespace motor::client
