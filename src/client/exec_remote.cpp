#include "client/exec_remote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <list>
#include <thread>

#include <fmt/format.h>

#include "client/cli_common.hpp"
#include "client/endpoint_session.hpp"
#include "client/exit_codes.hpp"
#include "motor/unique_fd.hpp"

namespace motor::client {
namespace {

int g_stop_write = -1;  // the stop pipe's write end, for the signal handler

void request_stop(int) {
  const char byte = 's';
  (void)!::write(g_stop_write, &byte, 1);
}

Expected<sockaddr_un> socket_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return Error{"usage", "--listen: socket path too long or empty: " + path};
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// A socket left by an endpoint that is gone is replaced; a live one, or anything else at the
// path, is not touched.
Status clear_stale(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) return Error{"usage", fmt::format("--listen: {} exists and is not a socket", path)};
  UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe && connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
    return Error{"unavailable", fmt::format("--listen: an endpoint already listens on {}", path)};
  }
  if (unlink(path.c_str()) != 0) return Error{"unavailable", fmt::format("--listen: cannot remove {}: {}", path, std::strerror(errno))};
  return {};
}

// The socket, 0600 from the moment it exists (umask), listening.
Expected<UniqueFd> listen_on(const std::string& path) {
  auto addr = socket_address(path);
  if (!addr) return addr.error();
  if (auto st = clear_stale(path, *addr); !st) return st.error();
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Error{"unavailable", fmt::format("socket: {}", std::strerror(errno))};
  const mode_t old = umask(0177);
  const int rc = bind(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr);
  const int err = errno;
  umask(old);
  if (rc != 0) return Error{"unavailable", fmt::format("--listen: cannot bind {}: {}", path, std::strerror(err))};
  if (chmod(path.c_str(), 0600) != 0 || listen(fd.get(), 16) != 0) {
    unlink(path.c_str());
    return Error{"unavailable", fmt::format("--listen: {}: {}", path, std::strerror(errno))};
  }
  return fd;
}

// One caller's endpoint: only this account may connect (the socket's mode says so; the peer's
// credentials are checked too).
bool same_account(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

int listen_for_callers(const std::string& path, const EndpointConfig& config) {
  int stop[2];
  if (pipe2(stop, O_CLOEXEC | O_NONBLOCK) != 0) return kExitSoftware;
  UniqueFd stop_read(stop[0]), stop_write(stop[1]);
  g_stop_write = stop[1];
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  auto listener = listen_on(path);
  if (!listener) {
    fmt::print(stderr, "motor: {}\n", listener.error().message);
    return listener.error().code == "usage" ? kExitUsage : kExitUnavailable;
  }
  fmt::print(stderr, "motor: exec-remote listening on {}\n", path);
  std::list<std::thread> callers;
  for (;;) {
    pollfd fds[2] = {{listener->get(), POLLIN, 0}, {stop_read.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents & POLLIN) break;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (!same_account(fd)) {
      ::close(fd);
      continue;
    }
    callers.emplace_back([fd, &config, stop_fd = stop_read.get()] {
      serve_caller(fd, fd, config, stop_fd);
      ::close(fd);
    });
  }
  unlink(path.c_str());
  for (auto& t : callers) t.join();
  return 0;
}

}  // namespace

int run_exec_remote(const CliOptions& o) {
  signal(SIGPIPE, SIG_IGN);  // a caller that went away is an EPIPE, never the endpoint's end
  const char* ssh_command = std::getenv("MOTOR_SSH_COMMAND");
  const EndpointConfig config{endpoint_of(o), ssh_command ? std::optional<std::string>(ssh_command) : std::nullopt};
  if (o.stdio) {
    serve_caller(STDIN_FILENO, STDOUT_FILENO, config);
    return 0;
  }
  return listen_for_callers(o.listen_path, config);
}

}  // namespace motor::client
