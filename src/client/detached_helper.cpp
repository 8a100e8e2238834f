#include "client/detached_helper.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "motor/unique_fd.hpp"

namespace motor::client {

void start_detached_self(const std::vector<std::string>& args) {
  // This binary by its name (so that ps shows `motor`), or through /proc if it was replaced.
  char self[PATH_MAX];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string exe = len > 0 ? std::string(self, static_cast<size_t>(len)) : "";
  if (exe.empty() || exe.ends_with(" (deleted)")) exe = "/proc/self/exe";
  std::vector<std::string> all{"motor"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Everything above allocates; below, until exec, only system calls (the client may have threads).
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() != 0) _exit(0);
    const int null = ::open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    syscall(SYS_close_range, 3u, ~0u, 0u);  // the caller's pipes never stay open in the helper
    // Nor its working directory: a checkout removed while a helper sat in it would stay a
    // deleted-but-held directory, and a watcher of it would never hear it go.
    if (chdir("/") != 0) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  if (child > 0) {
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

bool unix_address(const std::string& path, sockaddr_un& addr) {
  addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

namespace {

bool bind_sole_listener(int fd, const std::string& path) {
  sockaddr_un addr;
  if (!unix_address(path, addr)) return false;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return true;
  if (errno != EADDRINUSE) return false;
  UniqueFd probe(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!probe || connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return false;
  if (errno != ECONNREFUSED) return false;
  ::unlink(path.c_str());
  return bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

volatile sig_atomic_t stop_flag = 0;
void set_stop_flag(int) { stop_flag = 1; }

}  // namespace

std::optional<SoleListener> SoleListener::open(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd || !bind_sole_listener(fd.get(), path)) return std::nullopt;
  struct stat bound {};
  if (::lstat(path.c_str(), &bound) < 0 || listen(fd.get(), 16) < 0) return std::nullopt;
  return SoleListener(std::move(fd), path, bound.st_dev, bound.st_ino);
}

SoleListener::SoleListener(SoleListener&& other) noexcept
    : fd_(std::move(other.fd_)), path_(std::move(other.path_)), dev_(other.dev_), ino_(other.ino_), owned_(other.owned_) {
  other.owned_ = false;
}

SoleListener::~SoleListener() {
  if (owned_) ::unlink(path_.c_str());
}

bool SoleListener::still_ours() {
  struct stat now {};
  if (owned_ && (::lstat(path_.c_str(), &now) < 0 || now.st_ino != ino_ || now.st_dev != dev_)) owned_ = false;
  return owned_;
}

void catch_stop_signals() {
  signal(SIGPIPE, SIG_IGN);
  struct sigaction stop {};
  stop.sa_handler = set_stop_flag;
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGHUP, &stop, nullptr);
}

bool stop_requested() { return stop_flag != 0; }

bool peer_is_this_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
}

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::string private_runtime_dir(std::string_view name, size_t room) {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = xdg && xdg[0] == '/' ? fmt::format("{}/{}", xdg, name) : fmt::format("/tmp/{}-{}", name, getuid());
  if (dir.size() + room >= sizeof(sockaddr_un{}.sun_path)) dir = fmt::format("/tmp/{}-{}", name, getuid());
  if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) return "";
  struct stat st {};
  if (::lstat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) return "";
  return dir;
}

}  // namespace motor::client
