#include "bbrunner/action.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <fmt/format.h>
#include <simdjson.h>

#include "bbrunner/runner_link.hpp"
#include "protocol/json_writer.hpp"
#include "protocol/messages.hpp"
#include "motor_job.pb.h"
#include "resourceusage.pb.h"

namespace motor::bbrunner {
namespace {

// After a cancel, how long the job's end may take before the call gives up on it (the runner
// still kills and reaps it: nothing of the job outlives it either way).
constexpr auto kCancelGrace = std::chrono::seconds(30);
constexpr auto kPoll = std::chrono::milliseconds(50);

std::string unique_workspace_key() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("bb-{}-{}", getpid(), ++counter);
}

Status write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("internal", std::string("writing an output file: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return {};
}

grpc::Status runner_error(protocol::ErrorCode code, const std::string& message) {
  if (code == protocol::ErrorCode::kBadRequest) return {grpc::StatusCode::INVALID_ARGUMENT, message};
  if (code == protocol::ErrorCode::kUnauthorized) return {grpc::StatusCode::PERMISSION_DENIED, message};
  return {grpc::StatusCode::UNAVAILABLE, message};
}

grpc::Status refusal(const protocol::Message& m) {
  const std::string& reason = m.outcome.reason;
  const std::string detail = reason + (m.refusal_detail ? ": " + *m.refusal_detail : "");
  using protocol::RefusalReason;
  if (m.outcome.refusal == RefusalReason::kWorkspaceSetupFailed) return {grpc::StatusCode::INVALID_ARGUMENT, detail};
  if (m.outcome.refusal == RefusalReason::kNetworkUnsupported) return {grpc::StatusCode::FAILED_PRECONDITION, detail};
  return {grpc::StatusCode::UNAVAILABLE, detail};  // draining, full, disk full: bb_worker retries
}

void set_duration(google::protobuf::Duration& d, int64_t us) {
  d.set_seconds(us / 1000000);
  d.set_nanos(static_cast<int32_t>((us % 1000000) * 1000));
}

// POSIXResourceUsage from the terminal record's resource_usage (the job cgroup's figures).
void add_resource_usage(const std::string& terminal_json, int signal, buildbarn::runner::RunResponse& reply) {
  buildbarn::resourceusage::POSIXResourceUsage usage;
  simdjson::dom::parser parser;
  simdjson::dom::element ru;
  int64_t v = 0;
  if (!parser.parse(terminal_json).at_key("resource_usage").get(ru)) {
    if (!ru.at_key("cpu_user_us").get_int64().get(v)) set_duration(*usage.mutable_user_time(), v);
    if (!ru.at_key("cpu_system_us").get_int64().get(v)) set_duration(*usage.mutable_system_time(), v);
    if (!ru.at_key("memory_peak_bytes").get_int64().get(v)) usage.set_maximum_resident_set_size(v);
  }
  if (signal > 0) {
    const char* name = sigabbrev_np(signal);
    usage.set_termination_signal(name ? name : std::to_string(signal));
  }
  reply.add_resource_usage()->PackFrom(usage);
}

// The job behind the action, for bb_worker's auxiliary metadata (motor_job.proto).
void add_motor_job(const protocol::Message& m, buildbarn::runner::RunResponse& reply) {
  MotorJob job;
  job.set_job_id(m.job_id);
  job.set_terminal_record(m.raw);
  reply.add_resource_usage()->PackFrom(job);
}

// The terminal record as bb_worker's answer: bb_runner's conventions (a signal is exit code -1
// with termination_signal set).
grpc::Status finish(const protocol::Message& m, buildbarn::runner::RunResponse& reply) {
  using Kind = protocol::Outcome::Kind;
  if (m.killed == std::optional<std::string>("deadline")) {
    return {grpc::StatusCode::DEADLINE_EXCEEDED, "the action ran past its timeout and was killed"};
  }
  // A cancelled or shut-down job's outcome is the kill's signal (exec-remote/v1): not a result.
  if (m.killed == std::optional<std::string>("cancel") || m.killed == std::optional<std::string>("shutdown")) {
    return {grpc::StatusCode::CANCELLED, "the action was cancelled"};
  }
  switch (m.outcome.kind) {
    case Kind::kExit:
      reply.set_exit_code(m.outcome.code);
      add_resource_usage(m.raw, 0, reply);
      add_motor_job(m, reply);
      return grpc::Status::OK;
    case Kind::kSignal:
      reply.set_exit_code(-1);
      add_resource_usage(m.raw, m.outcome.signal, reply);
      add_motor_job(m, reply);
      return grpc::Status::OK;
    case Kind::kCancelled: return {grpc::StatusCode::CANCELLED, "the action was cancelled"};
    case Kind::kRefusedBeforeStart: return refusal(m);
    default: return {grpc::StatusCode::INTERNAL, "the runner does not know how the action ended"};
  }
}

struct OutputFiles {
  UniqueFd out, err;
};

}  // namespace

std::optional<int64_t> timeout_from_deadline(std::chrono::system_clock::time_point deadline,
                                             std::chrono::system_clock::time_point now) {
  if (deadline == std::chrono::system_clock::time_point::max() || deadline.time_since_epoch().count() <= 0 ||
      deadline - now > std::chrono::hours(24 * 365 * 100)) {
    return std::nullopt;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  return std::max<int64_t>(1, (left + 999) / 1000);
}

std::string exec_run_request(const buildbarn::runner::RunRequest& request, const RunSettings& settings,
                             const std::string& workspace_key, std::optional<int64_t> timeout_s) {
  protocol::JsonWriter w;
  w.begin_object().field("id", 1).field("method", "exec.run").key("params").begin_object();
  w.key("argv").begin_array();
  for (const auto& arg : request.arguments()) w.string(arg);
  w.end_array();
  w.key("env").begin_object();
  for (const auto& [name, value] : request.environment_variables()) w.field(name, value);
  w.end_object();
  w.field("cwd", request.working_directory()).field("workspace_key", workspace_key);
  w.key("host_workspace").begin_object().field("input_root", request.input_root_directory());
  w.field("tmp", request.temporary_directory()).end_object();
  w.field("network", settings.network);
  if (timeout_s) w.field("timeout", *timeout_s);
  if (settings.memory_bytes) w.field("memory", *settings.memory_bytes);
  if (settings.cpus) w.field("cpus", *settings.cpus);
  w.end_object().end_object();
  return w.take();
}

grpc::Status run_action(const RunSettings& settings, const BuildDirectory& build, grpc::ServerContext& context,
                        const buildbarn::runner::RunRequest& request, buildbarn::runner::RunResponse& reply) {
  if (request.arguments().empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "Insufficient number of command arguments"};
  OutputFiles files;
  for (auto [path, fd] : {std::pair{&request.stdout_path(), &files.out}, std::pair{&request.stderr_path(), &files.err}}) {
    auto file = build.create_log(*path);
    if (!file) return {grpc::StatusCode::INVALID_ARGUMENT, "output file " + file.error().message};
    *fd = std::move(*file);
  }
  auto link = RunnerLink::connect(settings.runner_socket);
  if (!link) return {grpc::StatusCode::UNAVAILABLE, link.error().message};
  const auto timeout_s = timeout_from_deadline(context.deadline(), std::chrono::system_clock::now());
  if (auto st = link->send(exec_run_request(request, settings, unique_workspace_key(), timeout_s)); !st) {
    return {grpc::StatusCode::UNAVAILABLE, st.error().message};
  }
  simdjson::dom::parser parser;
  std::string job_id;
  std::optional<std::chrono::steady_clock::time_point> cancelled_at;
  bool output_lost = false;  // the runner's history dropped output before we read it
  for (;;) {
    if (!cancelled_at && context.IsCancelled()) cancelled_at = std::chrono::steady_clock::now();
    if (cancelled_at && !job_id.empty()) {  // once: the job's end still arrives on this stream
      if (auto st = link->send(fmt::format(R"({{"id":2,"method":"exec.cancel","params":{{"job_id":"{}"}}}})", job_id)); !st)
        return {grpc::StatusCode::CANCELLED, "cancelled; " + st.error().message};
      job_id = "-";
    }
    if (cancelled_at && std::chrono::steady_clock::now() - *cancelled_at > kCancelGrace)
      return {grpc::StatusCode::CANCELLED, "cancelled; the runner is still ending the job"};
    auto frame = link->next(kPoll);
    if (!frame) return {grpc::StatusCode::UNAVAILABLE, frame.error().message};
    if (!*frame) continue;
    auto m = protocol::parse_message(parser, **frame);
    if (!m) return {grpc::StatusCode::INTERNAL, "a record from the runner: " + m.error().message};
    if (m->kind == protocol::Message::Kind::kError) return runner_error(m->error, m->error_message);
    if (m->kind == protocol::Message::Kind::kResult) continue;  // exec.cancel's answer
    // (Output bytes are base64: the name cannot appear inside them.)
    if (m->raw.find("\"truncated_before_seq\"") != std::string::npos) output_lost = true;
    if (m->type == "accepted" && job_id.empty()) job_id = m->job_id;
    if (m->type == "output") {
      if (auto st = write_all(m->stream == "stderr" ? files.err.get() : files.out.get(), m->bytes); !st)
        return {grpc::StatusCode::INTERNAL, st.error().message};
    }
    if (m->type == "terminal") {
      if (cancelled_at) return {grpc::StatusCode::CANCELLED, "the action was cancelled"};
      if (output_lost) {
        return {grpc::StatusCode::INTERNAL,
                "the action's output outran the runner's job history (job_log_max_size): stdout/stderr are incomplete"};
      }
      return finish(*m, reply);
    }
  }
}

}  // namespace motor::bbrunner
