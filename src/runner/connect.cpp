#include "runner/connect.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "motor/fd_io.hpp"
#include "runner/bridge_account.hpp"
#include "protocol/frame.hpp"
#include "protocol/json_writer.hpp"

namespace motor::runner {
namespace {

// What `motor --host` asks for: the forced command sees it as SSH_ORIGINAL_COMMAND.
constexpr std::string_view kClientCommand = "motor-runner connect";

// Under sshd, only the client's own request is bridged: `ssh host motor list` and a plain
// `ssh host` would otherwise wait silently for frames that never come.
bool unexpected_ssh_command(const std::optional<std::string>& caller) {
  if (!std::getenv("SSH_CONNECTION")) return false;  // not run by sshd
  const char* original = std::getenv("SSH_ORIGINAL_COMMAND");
  if (!original) return caller.has_value();  // a forced command, and the client asked for no command
  std::string_view asked(original);
  while (!asked.empty() && (asked.back() == ' ' || asked.back() == '\n')) asked.remove_suffix(1);
  return !(asked == kClientCommand || asked.starts_with(std::string(kClientCommand) + " "));
}

}  // namespace

int run_connect_bridge(const std::string& socket_path, const std::optional<std::string>& caller) {
  if (unexpected_ssh_command(caller)) {
    fmt::print(stderr, "motor-runner connect: this SSH login only carries motor's protocol; run `motor --host "
                       "ssh://USER@HOST COMMAND` on your own machine instead (docs/remote-callers.md)\n");
    return 64;
  }
  if (!caller && bridge_uid() == geteuid()) {
    fmt::print(stderr, "motor-runner connect: the {} account bridges named callers: its authorized_keys line must be "
                       "command=\"motor-runner connect --caller NAME\" (conf/authorized_keys.example)\n", kBridgeAccount);
    return 64;
  }
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) {
    fmt::print(stderr, "motor-runner connect: socket path too long: {}\n", socket_path);
    return 64;
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    fmt::print(stderr, "motor-runner connect: cannot reach the runner at {}: {}\n", socket_path, std::strerror(errno));
    return 69;
  }
  if (caller) {
    // Name the caller for this session; the reply is the bridge's, not the client's.
    protocol::JsonWriter w;
    w.begin_object().field("id", 0).field("method", "runner.identify");
    w.key("params").begin_object().field("caller", *caller).end_object().end_object();
    const std::string frame = protocol::encode_frame(w.str());
    char header[4];
    if (!write_all(sock, frame.data(), frame.size()) || !read_exact(sock, header, 4)) {
      fmt::print(stderr, "motor-runner connect: the runner closed the connection\n");
      return 69;
    }
    const uint32_t len = (uint32_t{static_cast<unsigned char>(header[0])} << 24) |
                         (uint32_t{static_cast<unsigned char>(header[1])} << 16) |
                         (uint32_t{static_cast<unsigned char>(header[2])} << 8) | static_cast<unsigned char>(header[3]);
    if (len > protocol::kMaxFrameBytes) return 76;
    std::string reply(len, '\0');
    if (!read_exact(sock, reply.data(), len)) return 69;
    if (reply.find("\"error\"") != std::string::npos) {
      fmt::print(stderr, "motor-runner connect: the runner refused the caller name: {}\n", reply);
      // The caller's client gets the runner's refusal itself (e.g. runner_full: too many sessions).
      (void)write_all(STDOUT_FILENO, header, 4);
      (void)write_all(STDOUT_FILENO, reply.data(), reply.size());
      return reply.find("\"runner_full\"") != std::string::npos ? 75 : 77;
    }
  }
  // Copy bytes both ways until the runner closes; stdin's EOF half-closes the socket.
  std::vector<char> buf(64 * 1024);
  bool stdin_open = true;
  for (;;) {
    pollfd fds[2] = {{sock, POLLIN, 0}, {STDIN_FILENO, static_cast<short>(stdin_open ? POLLIN : 0), 0}};
    if (poll(fds, stdin_open ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return 70;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::read(sock, buf.data(), buf.size());
      if (n <= 0) return 0;
      if (!write_all(STDOUT_FILENO, buf.data(), static_cast<size_t>(n))) return 0;
    }
    if (stdin_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
      if (n <= 0) {
        stdin_open = false;
        shutdown(sock, SHUT_WR);
      } else if (!write_all(sock, buf.data(), static_cast<size_t>(n))) {
        return 0;
      }
    }
  }
}

}  // namespace motor::runner
