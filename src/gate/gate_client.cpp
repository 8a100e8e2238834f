#include "gate/gate_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "motor/sys_error.hpp"
#include "protocol/json_writer.hpp"

namespace motor::gate {
namespace {

volatile sig_atomic_t g_interrupted = 0;

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void set_interrupted() { g_interrupted = 1; }
bool interrupted() { return g_interrupted != 0; }

int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string JobResult::outcome_text() const {
  if (!error.empty()) return "error: " + error;
  if (!have_terminal) return "no terminal record";
  using K = protocol::Outcome::Kind;
  std::string s;
  switch (outcome.kind) {
    case K::kExit: s = fmt::format("exit {}", outcome.code); break;
    case K::kSignal: s = fmt::format("signal {}", outcome.signal); break;
    case K::kCancelled: s = "cancelled"; break;
    case K::kRefusedBeforeStart: s = "refused_before_start (" + outcome.reason + ")"; break;
    case K::kOutcomeUnknown: s = "outcome_unknown"; break;
    case K::kHistoryExpired: s = "history_expired"; break;
  }
  if (killed) s += ", killed: " + *killed;
  if (oom_killed) s += ", oom_killed";
  if (refusal_detail) s += ": " + *refusal_detail;
  return s;
}

Expected<std::unique_ptr<GateSession>> GateSession::connect_socket(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) return make_error("config", "socket path too long: " + socket_path);
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) return sys_error("connect " + socket_path);
  std::unique_ptr<GateSession> s(new GateSession());
  s->fd_ = std::move(fd);
  return s;
}

Expected<std::unique_ptr<GateSession>> GateSession::via_bridge(const std::string& self_exe, const std::string& socket_path,
                                                               const std::string& caller) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(sv[0]);
    close(sv[1]);
    return sys_error("fork", e);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(70);
    dup2(sv[1], 0);
    dup2(sv[1], 1);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, 2);
    execl(self_exe.c_str(), "motor-runner", "connect", "--caller", caller.c_str(), "--socket", socket_path.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  std::unique_ptr<GateSession> s(new GateSession());
  s->fd_ = UniqueFd(sv[0]);
  s->bridge_ = pid;
  return s;
}

GateSession::~GateSession() {
  fd_.reset();  // the bridge sees EOF, half-closes towards the runner and exits
  if (bridge_ > 0) {
    for (int i = 0; i < 200; ++i) {
      if (waitpid(bridge_, nullptr, WNOHANG) == bridge_) return;
      usleep(10000);
    }
    kill(bridge_, SIGKILL);
    waitpid(bridge_, nullptr, 0);
  }
}

Status GateSession::send(const std::string& payload) {
  const std::string frame = protocol::encode_frame(payload);
  if (!write_all(fd_.get(), frame.data(), frame.size())) return sys_error("sending to the runner");
  return {};
}

Expected<std::string> GateSession::next_frame(int64_t deadline_ms) {
  char buf[65536];
  while (frames_.empty()) {
    if (interrupted()) return make_error("interrupted", "interrupted");
    const int64_t left = deadline_ms - now_ms();
    if (left <= 0) return make_error("timeout", "the runner did not answer in time");
    pollfd p{fd_.get(), POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200)));
    if (rc < 0 && errno != EINTR) return sys_error("poll");
    if (rc <= 0) continue;
    const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return sys_error("reading from the runner");
    }
    if (n == 0) return make_error("io", "the runner closed the connection");
    std::vector<std::string> got;
    if (auto s = decoder_.feed(std::string_view(buf, static_cast<size_t>(n)), got); !s) return s.error();
    for (auto& f : got) frames_.push_back(std::move(f));
  }
  std::string f = std::move(frames_.front());
  frames_.pop_front();
  return f;
}

Expected<std::string> GateSession::call(std::string_view method, std::string_view params_json, int timeout_ms) {
  const int64_t id = next_id_++;
  protocol::JsonWriter w;
  w.begin_object().field("id", id).field("method", method).field_raw("params", params_json).end_object();
  if (auto s = send(w.str()); !s) return s.error();
  const int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    auto frame = next_frame(deadline);
    if (!frame) return frame.error();
    auto m = protocol::parse_message(parser_, *frame);
    if (!m) return m.error();
    if (!m->id || *m->id != id) continue;
    if (m->kind == protocol::Message::Kind::kError) return make_error(m->error_code, m->error_message);
    if (m->kind != protocol::Message::Kind::kResult) continue;
    simdjson::dom::element root, result;
    if (parser_.parse(*frame).get(root) || root["result"].get(result)) return make_error("io", "a reply without a result");
    return std::string(simdjson::minify(result));
  }
}

JobResult GateSession::run(const JobRequest& rq, int timeout_ms,
                           const std::function<void(const std::string& job_id)>& on_first_output) {
  JobResult r;
  const int64_t id = next_id_++;
  protocol::JsonWriter w;
  w.begin_object().field("id", id).field("method", "exec.run").key("params").begin_object();
  w.field("workspace_key", rq.workspace_key).field("repository_root", "").field("cwd", rq.cwd);
  if (!rq.argv.empty()) {
    w.key("argv").begin_array();
    for (const auto& a : rq.argv) w.string(a);
    w.end_array();
  } else {
    w.field("command", rq.command);
  }
  w.key("env").begin_object();
  for (const auto& [k, v] : rq.env) w.field(k, v);
  w.end_object();
  w.field("timeout", rq.timeout_s);
  if (!rq.memory.empty()) w.field("memory", rq.memory);
  if (rq.cpus > 0) w.field("cpus", rq.cpus);
  if (!rq.network.empty()) w.field("network", rq.network);
  if (rq.untrusted) w.field("untrusted", true);
  w.end_object().end_object();
  if (auto s = send(w.str()); !s) {
    r.error = s.error().message;
    return r;
  }
  const int64_t deadline = now_ms() + timeout_ms;
  bool saw_output = false;
  for (;;) {
    auto frame = next_frame(deadline);
    if (!frame) {
      r.error = frame.error().message;
      return r;
    }
    auto m = protocol::parse_message(parser_, *frame);
    if (!m) {
      r.error = "undecodable record: " + m.error().message;
      return r;
    }
    if (!m->id || *m->id != id) continue;
    if (m->kind == protocol::Message::Kind::kError) {
      r.error = m->error_code + ": " + m->error_message;
      return r;
    }
    if (m->kind != protocol::Message::Kind::kRecord) continue;
    if (m->type == "accepted") {
      r.job_id = m->job_id;
      r.accepted_json = m->raw;
      simdjson::dom::element root;
      simdjson::dom::array names;
      if (!parser_.parse(m->raw).get(root) && !root["env_not_forwarded"].get_array().get(names)) {
        for (auto n : names) {
          std::string_view s;
          if (!n.get_string().get(s)) r.env_not_forwarded.emplace_back(s);
        }
      }
    } else if (m->type == "output") {
      (m->stream == "stderr" ? r.err : r.out) += m->bytes;
      if (!saw_output) {
        saw_output = true;
        if (on_first_output) on_first_output(r.job_id);
      }
    } else if (m->type == "terminal") {
      r.have_terminal = true;
      r.terminal_json = m->raw;
      r.outcome = m->outcome;
      r.killed = m->killed;
      r.refusal_detail = m->refusal_detail;
      if (r.job_id.empty()) r.job_id = m->job_id;
      simdjson::dom::element root;
      bool oom = false;
      if (!parser_.parse(r.terminal_json).get(root) && !root["oom_killed"].get_bool().get(oom)) r.oom_killed = oom;
      return r;
    }
  }
}

}  // namespace motor::gate
