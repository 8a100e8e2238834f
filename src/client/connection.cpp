#include "client/connection.hpp"

#include <poll.h>
#include <simdjson.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "client/ssh_spare.hpp"
#include "motor/sys_error.hpp"
#include "motor/version.hpp"

namespace motor::client {

Connection::Connection(UniqueFd fd) : fd_(std::move(fd)), parser_(std::make_unique<simdjson::dom::parser>()) {}
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;
Connection::~Connection() = default;

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

Expected<Connection> Connection::open(const Endpoint& endpoint, const char* ssh_command) {
  if (!endpoint.ssh) return open(endpoint.socket_path);
  const SshTarget& target = *endpoint.ssh;
  const std::string command = ssh_command ? ssh_command : "";
  const std::string control_path = spare_sessions_enabled() ? SshSession::control_path_for(target, command) : "";
  bool keeper_answered = false;
  if (!control_path.empty()) {
    auto spare = take_spare_session(spare_keeper_path(control_path));
    keeper_answered = spare.keeper_answered;
    if (spare.session) {
      if (auto c = from_spare(target, control_path, std::move(spare))) return std::move(*c);
    }
  }
  auto c = open_ssh(target, ssh_command);
  // Ended before the runner spoke, perhaps on a dead or stuck control master: once more on a new
  // one. (A socket file nobody listens on ssh replaces by itself.)
  if (!c && c.error().code == "unreachable") c = open_ssh(target, ssh_command);
  if (c && !control_path.empty() && !keeper_answered) start_spare_keeper(target, command, control_path);
  return c;
}

std::optional<Connection> Connection::from_spare(const SshTarget& target, const std::string& control_path,
                                                 SpareAnswer spare) {
  Connection c(std::move(spare.session));
  c.remote_host_ = target.host;
  // Nothing that changes anything is sent on a spare before the runner answered runner.hello on
  // it: the keeper's hello, answered before the hand-over (checked here as our own), or still to
  // come (read first), or our own on an older keeper's spare. One that ended or hangs (its master
  // stopped) is dropped; the call's own session then finds out why, and replaces the master if
  // need be. A spare answered before the hand-over still needs its master: a stopped one shows
  // nothing to the keeper, so it is asked on its local socket (not the runner: no round trip over
  // the network). (A spare whose path ends between that and our first request is a connection
  // lost before the job's id, as on a session of our own: never a job run twice.)
  constexpr std::chrono::seconds kSpareLimit{3};
  if (spare.hello_reply && !control_master_answers(control_path, kSpareLimit)) return std::nullopt;
  Status st = spare.hello_reply ? c.check_hello(*spare.hello_reply)
              : spare.hello_sent ? c.await_hello(kSpareLimit)
                                 : c.hello(kSpareLimit);
  if (!st) return std::nullopt;
  c.runner_answered_ = true;
  return c;
}

Expected<Connection> Connection::open_ssh(const SshTarget& target, const char* ssh_command) {
  UniqueFd socket;
  auto session = SshSession::start(target, ssh_command, socket);
  if (!session) return session.error();
  Connection c(std::move(socket));
  c.ssh_ = std::make_unique<SshSession>(std::move(*session));
  c.remote_host_ = target.host;
  // Covers ssh's own ConnectTimeout (10 s) and a login; a master that never answers ends here.
  if (auto st = c.hello(std::chrono::seconds(20)); !st) {
    if (st.error().code == "timeout" || st.error().code == kHostUnreachable || st.error().code == kNotBridged) {
      if (c.ssh_->replace_dead_master()) return make_error("unreachable", st.error().message);
    }
    if (st.error().code == "timeout") {
      return make_error(kHostUnreachable, fmt::format("no answer from {} over SSH within 20 s; try again later", target.host));
    }
    return st.error();
  }
  return c;
}

// runner.hello with id 0 (the bridge's own runner.identify used id 0 and is answered by now), so
// the ids and replies the caller sees are the same as on a local socket.
Status Connection::hello(std::chrono::milliseconds limit) {
  if (auto s = send_raw(R"({"id":0,"method":"runner.hello","params":{}})"); !s) {
    return s.error().code == "unreachable" ? stream_ended() : s.error();
  }
  return await_hello(limit);
}

Status Connection::await_hello(std::chrono::milliseconds limit) {
  if (auto st = fill(nullptr, limit); !st) return st.error();
  std::string frame = std::move(frames_.front());
  frames_.pop_front();
  return check_hello(frame);
}

Status Connection::check_hello(const std::string& frame) {
  auto m = protocol::parse_message(*parser_, frame);
  if (!m) return make_error(kNotBridged, "the host's motor-runner connect sent a message this client cannot read");
  if (auto refusal = as_refusal(*m)) return *refusal;
  const std::string& host = remote_host_;
  if (m->kind == protocol::Message::Kind::kError && m->error_message.find("unknown method") != std::string::npos) {
    return make_error(kRunnerTooOld, fmt::format("the runner on {} is too old for this client (runner.hello: {}); ask its "
                                                 "operator to upgrade motor-runner",
                                                 host, m->error_message));
  }
  if (m->kind == protocol::Message::Kind::kError) {
    // The bridge's runner.identify (also id 0) was refused, and the bridge passed that on.
    return make_error(m->error == protocol::ErrorCode::kUnauthorized ? "unauthorized" : kNotBridged,
                      fmt::format("the runner on {} refused the caller name this key's forced command gives ({}: {}); "
                                  "the operator fixes the authorized_keys line",
                                  host, m->error_code, m->error_message));
  }
  simdjson::dom::element result;
  int64_t protocol = 0;
  if (parser_->parse(frame.data(), frame.size())["result"].get(result) || result["protocol"].get_int64().get(protocol) ||
      protocol < kProtocolVersion) {
    return make_error(kRunnerTooOld, fmt::format("the runner on {} speaks protocol {}, this client needs {}; ask its "
                                                 "operator to upgrade motor-runner",
                                                 host, protocol, kProtocolVersion));
  }
  return {};
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
    if (auto m = protocol::parse_message(*parser_, frame)) {
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

Error Connection::stream_ended() {
  if (ssh_) return ssh_->ended(runner_answered_);
  if (!remote_host_.empty()) return make_error("unreachable", fmt::format("lost the SSH session to {}", remote_host_));
  return make_error("unreachable", "the runner closed the connection");
}

Status Connection::fill(bool (*interrupted)(), std::chrono::milliseconds limit) {
  // One read buffer per thread (exec-remote runs a connection per thread), sized once: a read is
  // taken apart into frames before the next, and a binary output frame fits in one.
  thread_local std::string buf(256 * 1024, '\0');
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (frames_.empty()) {
    pollfd p{fd_.get(), POLLIN, 0};
    // SIGINT is blocked except inside ppoll (run_cli blocks it), so a Ctrl-C can only land
    // here, as EINTR, never in a gap where it would be missed.
    sigset_t during_wait;
    sigprocmask(SIG_SETMASK, nullptr, &during_wait);
    sigdelset(&during_wait, SIGINT);
    timespec left{};
    if (limit.count() >= 0) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      if (ns.count() <= 0) return make_error("timeout", "no answer in time");
      left.tv_sec = static_cast<time_t>(ns.count() / 1000000000);
      left.tv_nsec = static_cast<long>(ns.count() % 1000000000);
    }
    const int pr = ppoll(&p, 1, limit.count() >= 0 ? &left : nullptr, &during_wait);
    if (pr < 0 && errno == EINTR) {
      if (interrupted && interrupted()) return make_error("interrupted", "interrupted");
      continue;
    }
    if (pr == 0) continue;  // the deadline is checked above
    const ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return stream_ended();
    std::vector<std::string> got;
    if (auto st = decoder_.feed(std::string_view(buf.data(), static_cast<size_t>(n)), got); !st) {
      if (ssh_ && !runner_answered_) {
        // Not our protocol at all: the login ran something else (a shell, a banner, a menu).
        ssh_->ended(false);
        return make_error(kNotBridged, fmt::format("{} answered over SSH with something that is not motor-runner connect: "
                                                   "the account needs the forced command of conf/authorized_keys.example "
                                                   "(docs/remote-callers.md)",
                                                   ssh_->target().host));
      }
      return make_error("protocol", "the runner sent a broken frame: " + st.error().message);
    }
    for (auto& f : got) frames_.push_back(std::move(f));
  }
  runner_answered_ = true;
  return {};
}

Expected<protocol::Message> Connection::read(bool (*interrupted)(), std::chrono::milliseconds limit) {
  if (auto st = fill(interrupted, limit); !st) return st.error();
  std::string frame = std::move(frames_.front());
  frames_.pop_front();
  auto m = protocol::parse_message(*parser_, frame);
  if (!m) return make_error("protocol", "the runner sent a message this client cannot read: " + m.error().message);
  if (auto refusal = as_refusal(*m)) return *refusal;
  return m;
}

}  // namespace motor::client
