#include "gate/runner_session.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>
#include <simdjson.h>

#include "motor/sys_error.hpp"
#include "protocol/json_writer.hpp"

namespace motor::gate {
namespace {

volatile sig_atomic_t g_interrupted = 0;

// How long one read waits before the gate looks at its interrupt flag and deadline again.
constexpr int64_t kReadSliceMs = 200;

std::string exec_run_params(const JobRequest& rq) {
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", rq.workspace_key).field("repository_root", "").field("cwd", rq.cwd);
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
  w.end_object();
  return w.str();
}

void read_accepted(const protocol::Message& m, JobResult& r) {
  r.job_id = m.job_id;
  r.accepted_json = m.raw;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::array names;
  if (parser.parse(m.raw).get(root) || root["env_not_forwarded"].get_array().get(names)) return;
  for (auto n : names) {
    std::string_view s;
    if (!n.get_string().get(s)) r.env_not_forwarded.emplace_back(s);
  }
}

}  // namespace

void read_terminal_record(const protocol::Message& m, JobResult& r) {
  r.have_terminal = true;
  r.terminal_json = m.raw;
  r.outcome = m.outcome;
  r.killed = m.killed;
  r.refusal_detail = m.refusal_detail;
  if (r.job_id.empty()) r.job_id = m.job_id;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  bool oom = false;
  if (!parser.parse(r.terminal_json).get(root) && !root["oom_killed"].get_bool().get(oom)) r.oom_killed = oom;
}

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

Expected<std::unique_ptr<RunnerSession>> RunnerSession::connect_socket(const std::string& socket_path) {
  auto c = client::Connection::open(socket_path);
  if (!c) return c.error();
  return std::unique_ptr<RunnerSession>(new RunnerSession(std::move(*c), -1));
}

Expected<std::unique_ptr<RunnerSession>> RunnerSession::via_bridge(const std::string& self_exe,
                                                                   const std::string& socket_path,
                                                                   const std::string& caller) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
  UniqueFd ours(sv[0]), theirs(sv[1]);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return sys_error("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(70);
    dup2(theirs.get(), 0);
    dup2(theirs.get(), 1);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, 2);
    execl(self_exe.c_str(), "motor-runner", "connect", "--caller", caller.c_str(), "--socket", socket_path.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  theirs.reset();
  return std::unique_ptr<RunnerSession>(new RunnerSession(client::Connection::adopt(std::move(ours)), pid));
}

RunnerSession::~RunnerSession() {
  connection_.reset();  // the bridge sees EOF, half-closes towards the runner and exits
  if (bridge_ > 0) {
    for (int i = 0; i < 200; ++i) {
      if (waitpid(bridge_, nullptr, WNOHANG) == bridge_) return;
      usleep(10000);
    }
    kill(bridge_, SIGKILL);
    waitpid(bridge_, nullptr, 0);
  }
}

Expected<protocol::Message> RunnerSession::next_for(int64_t id, int64_t deadline_ms) {
  for (;;) {
    if (interrupted()) return make_error("interrupted", "interrupted");
    const int64_t left = deadline_ms - now_ms();
    if (left <= 0) return make_error("timeout", "the runner did not answer in time");
    auto m = connection_->read(interrupted, std::chrono::milliseconds(std::min(left, kReadSliceMs)));
    if (!m && m.error().code == "timeout") continue;
    if (!m || (m->id && *m->id == id)) return m;
  }
}

Expected<std::string> RunnerSession::call(std::string_view method, std::string_view params_json, int timeout_ms) {
  auto id = connection_->request(method, params_json);
  if (!id) return id.error();
  const int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    auto m = next_for(*id, deadline);
    if (!m) return m.error();
    if (m->kind == protocol::Message::Kind::kError) return make_error(m->error_code, m->error_message);
    if (m->kind != protocol::Message::Kind::kResult) continue;
    simdjson::dom::parser parser;
    simdjson::dom::element result;
    if (parser.parse(m->raw)["result"].get(result)) return make_error("io", "a reply without a result");
    return std::string(simdjson::minify(result));
  }
}

JobResult RunnerSession::run(const JobRequest& rq, int timeout_ms,
                             const std::function<void(const std::string& job_id)>& on_first_output) {
  JobResult r;
  auto id = connection_->request("exec.run", exec_run_params(rq));
  if (!id) {
    r.error = id.error().message;
    return r;
  }
  const int64_t deadline = now_ms() + timeout_ms;
  bool saw_output = false;
  for (;;) {
    auto m = next_for(*id, deadline);
    if (!m) {
      r.error = m.error().message;
      return r;
    }
    if (m->kind == protocol::Message::Kind::kError) {
      r.error = m->error_code + ": " + m->error_message;
      return r;
    }
    if (m->kind != protocol::Message::Kind::kRecord) continue;
    if (m->type == "accepted") {
      read_accepted(*m, r);
    } else if (m->type == "output") {
      (m->stream == "stderr" ? r.err : r.out) += m->bytes;
      if (!saw_output && on_first_output) on_first_output(r.job_id);
      saw_output = true;
    } else if (m->type == "terminal") {
      read_terminal_record(*m, r);
      return r;
    }
  }
}

}  // namespace motor::gate
