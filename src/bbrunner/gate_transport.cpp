#include "bbrunner/gate_transport.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <simdjson.h>

#include "bbrunner/runner_link.hpp"
#include "gate/attack_steps.hpp"
#include "motor/sys_error.hpp"
#include "motor_job.pb.h"
#include "protocol/messages.hpp"
#include "runner.grpc.pb.h"

namespace motor::bbrunner {

using namespace std::chrono_literals;

struct BbWorkerTransport::Server {
  std::string memory;  // --memory ("" = the runner's default)
  int64_t cpus = 0;    // --cpus (0 = the runner's default)
  pid_t pid = -1;
  std::string log;
  std::unique_ptr<buildbarn::runner::Runner::Stub> offline, outbound;
};

namespace {

// Attacks on what a Run does not carry, and why (docs/buildbarn.md says the same).
constexpr std::pair<std::string_view, std::string_view> kNotApplicable[] = {
    {"other-caller-workspace",
     "a Run names no caller: every action is motor-bb-runner's, and each has only its own input root"},
    {"untrusted-unscreened-job", "a Run has no untrusted flag and no change screen (exec-remote extensions)"},
    {"untrusted-code-change", "a Run has no untrusted flag and no change screen (exec-remote extensions)"},
    {"env-canaries", "an action's environment is passed as given (hermetic actions); the filter is for callers' shells"},
    {"ssh-auth-sock", "an action's environment is passed as given (hermetic actions); the filter is for callers' shells"},
    {"scan-fifo", "no input root is scanned for changes: bb_worker collects an action's outputs itself"},
    {"scan-memory", "no input root is scanned for changes: bb_worker collects an action's outputs itself"},
};

bool has_bytes(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

Status make_dir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return sys_error("mkdir " + path);
  if (chmod(path.c_str(), mode) != 0) return sys_error("chmod " + path);  // past the umask, as bb_worker leaves it
  return {};
}

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    default: return "other";
  }
}

// What bb_worker got, in the gate's terms.
void read_reply(const grpc::Status& status, const buildbarn::runner::RunResponse& reply, gate::JobResult& r) {
  using Kind = protocol::Outcome::Kind;
  switch (status.error_code()) {
    case grpc::StatusCode::OK: break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // The call's deadline (the action's timeout) passed: the runner killed the job at its
      // timeout, or motor-bb-runner cancelled it as the call ended (action.cpp). The steps then
      // look on the host for anything of it left.
      r.have_terminal = true;
      r.outcome.kind = Kind::kSignal;
      r.outcome.signal = SIGKILL;
      r.killed = "deadline";
      r.refusal_detail = status.error_message();
      return;
    case grpc::StatusCode::CANCELLED:
      r.have_terminal = true;
      r.outcome.kind = Kind::kCancelled;
      r.killed = "cancel";
      return;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::PERMISSION_DENIED:
      // Refused before it ran: the code and the message are all bb_worker has.
      r.have_terminal = true;
      r.outcome.kind = Kind::kRefusedBeforeStart;
      r.outcome.reason = code_name(status.error_code());
      r.refusal_detail = status.error_message();
      return;
    default:
      r.error = fmt::format("Run failed: {} ({})", status.error_message(), static_cast<int>(status.error_code()));
      return;
  }
  MotorJob job;
  bool found = false;
  for (const auto& any : reply.resource_usage()) found = found || any.UnpackTo(&job);
  if (!found) {
    r.error = "the reply carries no Motor job record (motor_job.proto)";
    return;
  }
  simdjson::dom::parser parser;
  auto m = protocol::parse_message(parser, job.terminal_record());
  if (!m || m->type != "terminal") {
    r.error = "the reply's Motor job record is not a terminal record: " + job.terminal_record().substr(0, 300);
    return;
  }
  gate::read_terminal_record(*m, r);
  r.job_id = job.job_id();
  // bb_worker acts on the exit code (-1 with a termination signal for a signal): it must say what the record says.
  const int expected = r.outcome.kind == Kind::kExit ? r.outcome.code : -1;
  if (reply.exit_code() != expected) {
    r.error = fmt::format("the reply's exit code {} is not the job's outcome ({})", reply.exit_code(), r.outcome_text());
  }
}

}  // namespace

BbWorkerTransport::BbWorkerTransport(std::string bb_runner_exe) : exe_(std::move(bb_runner_exe)) {}

BbWorkerTransport::~BbWorkerTransport() { stop(); }

Expected<std::string> BbWorkerTransport::prepare(const std::string& gate_dir) {
  gate_dir_ = gate_dir;
  build_dir_ = gate_dir + "/build";
  if (auto s = make_dir(build_dir_, 0711); !s) return s.error();
  if (auto s = make_dir(build_dir_ + "/runs", 0755); !s) return s.error();
  return fmt::format("# motor-bb-runner gate: its build directory\nbb_build_directory = {}\n", build_dir_);
}

Status BbWorkerTransport::start(const std::string& runner_socket) {
  runner_socket_ = runner_socket;
  auto first = server_for("", 0);
  if (!first) return first.error();
  return {};
}

Expected<BbWorkerTransport::Server*> BbWorkerTransport::server_for(const std::string& memory, int64_t cpus) {
  for (auto& s : servers_) {
    if (s->memory == memory && s->cpus == cpus) return s.get();
  }
  auto s = std::make_unique<Server>();
  s->memory = memory;
  s->cpus = cpus;
  const std::string base = fmt::format("{}/bb-{}", gate_dir_, servers_.size());
  const std::string offline = base + ".sock", outbound = base + "-outbound.sock";
  s->log = base + ".log";
  std::vector<std::string> args{exe_, "--build-directory", build_dir_, "--listen", offline, "--outbound-listen", outbound,
                                "--runner-socket", runner_socket_};
  if (!memory.empty()) args.insert(args.end(), {"--memory", memory});
  if (cpus > 0) args.insert(args.end(), {"--cpus", std::to_string(cpus)});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  UniqueFd log(open(s->log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return sys_error("open " + s->log);
  const pid_t pid = fork();
  if (pid < 0) return sys_error("fork");
  if (pid == 0) {
    const int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(log.get(), 1) < 0 || dup2(log.get(), 2) < 0) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  s->pid = pid;
  Server* server = s.get();
  servers_.push_back(std::move(s));  // stop() ends it from here on, whatever happens below
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      server->pid = -1;
      return make_error("unavailable", "motor-bb-runner exited at start: " + gate::read_host(server->log).substr(0, 1000));
    }
    struct stat a {}, b {};
    if (stat(offline.c_str(), &a) == 0 && stat(outbound.c_str(), &b) == 0) {
      server->offline = buildbarn::runner::Runner::NewStub(grpc::CreateChannel("unix:" + offline, grpc::InsecureChannelCredentials()));
      server->outbound = buildbarn::runner::Runner::NewStub(grpc::CreateChannel("unix:" + outbound, grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      buildbarn::runner::CheckReadinessRequest ready;
      google::protobuf::Empty none;
      const grpc::Status st = server->offline->CheckReadiness(&ctx, ready, &none);
      if (!st.ok()) return make_error("unavailable", "motor-bb-runner is not ready: " + st.error_message());
      return server;
    }
    std::this_thread::sleep_for(10ms);
  }
  return make_error("unavailable", "motor-bb-runner did not listen within 10 s: " + gate::read_host(server->log).substr(0, 1000));
}

Expected<std::string> BbWorkerTransport::input_root(const std::string& key) {
  if (key.empty()) return make_error("invalid", "a job without a workspace key");
  auto [at, made] = action_dirs_.try_emplace(key);
  if (made) {
    std::random_device random;
    at->second = fmt::format("{:08x}{:08x}", random(), random());
  }
  const std::string action = build_dir_ + "/" + at->second;
  if (auto s = make_dir(action, 0755); !s) return s.error();
  if (auto s = make_dir(action + "/root", 0777); !s) return s.error();
  return at->second + "/root";
}

Expected<std::string> BbWorkerTransport::workspace_dir(const std::string& key) {
  auto root = input_root(key);
  if (!root) return root.error();
  return build_dir_ + "/" + *root;
}

std::optional<std::string> BbWorkerTransport::not_applicable(std::string_view id) const {
  for (const auto& [attack, why] : kNotApplicable) {
    if (attack == id) return std::string(why);
  }
  return std::nullopt;
}

std::string BbWorkerTransport::running_job_id() const {
  auto answer = call(runner_socket_, R"({"id":1,"method":"exec.status","params":{}})", 5s);
  if (!answer) return "";
  simdjson::dom::parser parser;
  simdjson::dom::array jobs;
  if (parser.parse(*answer)["result"]["running_jobs"].get_array().get(jobs) || jobs.size() != 1) return "";
  std::string_view id;
  return jobs.at(0)["job_id"].get_string().get(id) ? "" : std::string(id);
}

gate::JobResult BbWorkerTransport::run(const gate::JobRequest& rq, int timeout_ms,
                                       const std::function<void(const std::string& job_id)>& on_first_output) {
  gate::JobResult r;
  if (rq.untrusted) {
    r.error = "a Run has no untrusted flag";
    return r;
  }
  auto server = server_for(rq.memory, rq.cpus);
  auto root = server ? input_root(rq.workspace_key) : Expected<std::string>(server.error());
  const std::string run = fmt::format("runs/{}", ++runs_), dir = build_dir_ + "/" + run;
  Status laid_out = root ? make_dir(dir, 0755) : Status(root.error());
  if (laid_out) laid_out = make_dir(dir + "/tmp", 0777);
  if (laid_out) laid_out = make_dir(dir + "/server_logs", 0755);
  if (!laid_out) {
    r.error = laid_out.error().message;
    return r;
  }
  buildbarn::runner::RunRequest request;
  if (rq.argv.empty()) {
    for (const char* arg : {"/bin/sh", "-c"}) request.add_arguments(arg);
    request.add_arguments(rq.command);
  } else {
    for (const auto& arg : rq.argv) request.add_arguments(arg);
  }
  auto& env = *request.mutable_environment_variables();
  for (const auto& [name, value] : rq.env) env[name] = value;
  if (env.find("PATH") == env.end()) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";  // a REAPI client names its PATH
  request.set_working_directory(rq.cwd);
  request.set_input_root_directory(*root);
  request.set_temporary_directory(run + "/tmp");
  request.set_stdout_path(run + "/stdout");
  request.set_stderr_path(run + "/stderr");
  request.set_server_logs_directory(run + "/server_logs");
  auto& stub = rq.network == "outbound" ? (*server)->outbound : (*server)->offline;

  // bb_worker's deadline is the action's timeout; the gate's own wait bounds the call beyond it.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(rq.timeout_s));
  buildbarn::runner::RunResponse reply;
  auto call = std::async(std::launch::async, [&] { return stub->Run(&ctx, request, &reply); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool first_seen = !on_first_output;
  while (call.wait_for(5ms) != std::future_status::ready) {
    if (!first_seen && (has_bytes(dir + "/stdout") || has_bytes(dir + "/stderr"))) {
      first_seen = true;
      on_first_output(running_job_id());
    }
    if (gate::interrupted() || std::chrono::steady_clock::now() > give_up) ctx.TryCancel();
  }
  const grpc::Status status = call.get();
  r.out = gate::read_host(dir + "/stdout");
  r.err = gate::read_host(dir + "/stderr");
  read_reply(status, reply, r);
  return r;
}

void BbWorkerTransport::stop() {
  for (auto& s : servers_) {
    s->offline.reset();
    s->outbound.reset();
    if (s->pid <= 0) continue;
    kill(s->pid, SIGTERM);  // its calls get 5 s, then are cancelled with their jobs
    int status = 0;
    bool gone = false;
    for (int i = 0; i < 1000 && !gone; ++i) {
      gone = waitpid(s->pid, &status, WNOHANG) == s->pid;
      if (!gone) std::this_thread::sleep_for(10ms);
    }
    if (!gone) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &status, 0);
    }
    s->pid = -1;
  }
  servers_.clear();
}

}  // namespace motor::bbrunner
