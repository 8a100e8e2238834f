#include "client/connection.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "motor/sys_error.hpp"

namespace motor::client {

Expected<Connection> Connection::open(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) return make_error("usage", "socket path too long: " + socket_path);
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    const int err = errno;
    std::string hint = err == ENOENT || err == ECONNREFUSED ? "; is motor-runner running? (set MOTOR_SOCKET or --socket)"
                       : err == EACCES                     ? "; is your account in the runner's group (motor)?"
                                                           : "";
    return make_error("unreachable", fmt::format("cannot reach the runner at {}: {}{}", socket_path, std::strerror(err), hint));
  }
  return Connection(std::move(fd));
}

std::optional<Error> Connection::as_refusal(const protocol::Message& m) {
  if (m.kind != protocol::Message::Kind::kError || m.id) return std::nullopt;
  return Error{m.error_code, m.error_message};
}

std::optional<Error> Connection::queued_refusal() {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::vector<std::string> got;
    if (!decoder_.feed(std::string_view(buf, static_cast<size_t>(n)), got)) break;
    for (auto& f : got) frames_.push_back(std::move(f));
  }
  for (const auto& frame : frames_) {
    if (auto m = protocol::parse_message(parser_, frame)) {
      if (auto refusal = as_refusal(*m)) return refusal;
    }
  }
  return std::nullopt;
}

Status Connection::send_raw(std::string_view payload) {
  const std::string frame = protocol::encode_frame(payload);
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = ::send(fd_.get(), frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      // The runner answers a refused connection at once and closes it: its reason is waiting.
      if (auto refusal = queued_refusal()) return *refusal;
      return make_error("unreachable", fmt::format("lost the connection to the runner: {}", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  return {};
}

Expected<int64_t> Connection::request(std::string_view method, std::string_view params_json) {
  const int64_t id = next_id_++;
  auto s = send_raw(fmt::format("{{\"id\":{},\"method\":\"{}\",\"params\":{}}}", id, method, params_json));
  if (!s) return s.error();
  return id;
}

Expected<protocol::Message> Connection::read(bool (*interrupted)()) {
  std::vector<char> buf(64 * 1024);
  while (frames_.empty()) {
    pollfd p{fd_.get(), POLLIN, 0};
    // SIGINT is blocked except inside ppoll (run_cli blocks it), so a Ctrl-C can only land
    // here, as EINTR, never in a gap where it would be missed.
    sigset_t during_wait;
    sigprocmask(SIG_SETMASK, nullptr, &during_wait);
    sigdelset(&during_wait, SIGINT);
    const int pr = ppoll(&p, 1, nullptr, &during_wait);
    if (pr < 0 && errno == EINTR) {
      if (interrupted && interrupted()) return make_error("interrupted", "interrupted");
      continue;
    }
    const ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("unreachable", "the runner closed the connection");
    std::vector<std::string> got;
    if (auto st = decoder_.feed(std::string_view(buf.data(), static_cast<size_t>(n)), got); !st) {
      return make_error("protocol", "the runner sent a broken frame: " + st.error().message);
    }
    for (auto& f : got) frames_.push_back(std::move(f));
  }
  std::string frame = std::move(frames_.front());
  frames_.pop_front();
  auto m = protocol::parse_message(parser_, frame);
  if (!m) return make_error("protocol", "the runner sent a message this client cannot read: " + m.error().message);
  if (auto refusal = as_refusal(*m)) return *refusal;
  return m;
}

}  // namespace motor::client
