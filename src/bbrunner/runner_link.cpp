#include "bbrunner/runner_link.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace motor::bbrunner {

Expected<RunnerLink> RunnerLink::connect(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) return make_error("unavailable", "runner socket path too long: " + socket_path);
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return make_error("unavailable", std::string("socket: ") + std::strerror(errno));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return make_error("unavailable", "motor-runner at " + socket_path + ": " + std::strerror(errno));
  }
  return RunnerLink(std::move(fd));
}

Status RunnerLink::send(std::string_view request_json) {
  const std::string frame = protocol::encode_frame(request_json);
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = ::send(fd_.get(), frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("unavailable", std::string("sending to motor-runner: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return {};
}

Expected<std::optional<std::string>> RunnerLink::next(std::chrono::milliseconds wait) {
  if (ready_pos_ < ready_.size()) return std::optional<std::string>(std::move(ready_[ready_pos_++]));
  ready_.clear();
  ready_pos_ = 0;
  pollfd p{fd_.get(), POLLIN, 0};
  const int r = ::poll(&p, 1, static_cast<int>(wait.count()));
  if (r < 0 && errno != EINTR) return make_error("unavailable", std::string("poll: ") + std::strerror(errno));
  if (r <= 0) return std::optional<std::string>{};
  char buf[65536];
  const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return std::optional<std::string>{};
  if (n <= 0) return make_error("unavailable", "motor-runner closed the connection");
  if (auto st = decoder_.feed(std::string_view(buf, static_cast<size_t>(n)), ready_); !st) return st.error();
  if (ready_.empty()) return std::optional<std::string>{};
  return std::optional<std::string>(std::move(ready_[ready_pos_++]));
}

Expected<std::string> call(const std::string& socket_path, std::string_view request_json, std::chrono::milliseconds wait) {
  auto link = RunnerLink::connect(socket_path);
  if (!link) return link.error();
  if (auto st = link->send(request_json); !st) return st.error();
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    auto frame = link->next(std::chrono::milliseconds(100));
    if (!frame) return frame.error();
    if (*frame) return std::move(**frame);
  }
  return make_error("unavailable", "motor-runner did not answer in time");
}

}  // namespace motor::bbrunner
