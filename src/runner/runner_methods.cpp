// The protocol's methods (docs/protocol.md): the table the server dispatches on, and the handlers
// of exec.cancel/attach/status/list and runner.*. exec.run is in run_request.cpp, workspace.* in
// workspace_requests.cpp.
#include <chrono>

#include "reactor/slow_call.hpp"
#include "motor/version.hpp"
#include "runner/bridge_account.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"
#include "base/sha256.hpp"

namespace motor::runner {
namespace {

using protocol::JsonWriter;

constexpr size_t kListLimit = 500;
constexpr const char* kNoSuchJob = "no such job, or it is not yours";

// What an unknown job id is compared against, so it costs what a wrong secret costs.
const Sha256Digest kDummyDigest = sha256("motor: no such job");

}  // namespace

void Runner::register_methods() {
  using R = protocol::Request;
  auto add = [this](std::string name, void (Runner::*handler)(Session&, const R&)) {
    methods_.add(std::move(name), [this, handler](Session& s, const R& r) { (this->*handler)(s, r); });
  };
  add("exec.run", &Runner::handle_run);
  add("exec.cancel", &Runner::handle_cancel);
  add("exec.attach", &Runner::handle_attach);
  add("exec.status", &Runner::handle_status);
  add("exec.list", &Runner::handle_list);
  add("runner.hello", &Runner::handle_hello);
  add("runner.identify", &Runner::handle_identify);
  add("runner.status", &Runner::handle_runner_status);
  methods_.add("runner.drain", [this](Session& s, const R& r) { handle_drain(s, r, true); });
  methods_.add("runner.resume", [this](Session& s, const R& r) { handle_drain(s, r, false); });
  add("workspace.prepare", &Runner::handle_workspace_prepare);
  add("workspace.upload", &Runner::handle_workspace_upload);
  add("workspace.finish", &Runner::handle_workspace_finish);
  add("workspace.list", &Runner::handle_workspace_list);
  add("workspace.drop", &Runner::handle_workspace_drop);
  add("cache.status", &Runner::handle_cache_status);
  add("cache.clear", &Runner::handle_cache_clear);
}

void Runner::handle_frame(Session& session, const std::string& frame) {
  reactor::SlowCall timed("answering a request", reactor::SlowCall::kTraceOnly);
  std::optional<int64_t> id;
  auto request = protocol::parse_request(*parser_, frame, &id);
  if (!request) return session.send(protocol::encode_error(id, request.error().code, request.error().message));
  if (session.from_bridge_account() && !session.bridged() && request->method != "runner.identify") {
    return session.send(protocol::encode_error(request->id, "unauthorized", fmt::format("the {} account bridges SSH callers: its "
        "authorized_keys line must name one (command=\"motor-runner connect --caller NAME\")", kBridgeAccount)));
  }
  if (const MethodTable::Handler* handler = methods_.find(request->method)) return (*handler)(session, *request);
  session.send(protocol::encode_error(request->id, "bad_request",
                                      fmt::format("unknown method \"{}\"", request->method.substr(0, 64))));
}

// The route that submitted a job (its caller) and the operator see it without a secret.
bool Runner::owns(const Session& session, const Job& job) {
  return session.privileged() || job.caller() == session.caller();
}

Job* Runner::visible_job(Session& session, const protocol::JobRef& ref) {
  Job* job = jobs_.find(ref.job_id);
  if (job && owns(session, *job)) return job;
  if (!ref.secret) return nullptr;
  // The direct route: decided on the digest alone, before any of the job's files are touched.
  // An unknown id (or a job without a secret) is compared with a fixed dummy digest, so the
  // answer and its cost are those of a wrong secret.
  const Sha256Digest presented = sha256(*ref.secret);
  const bool direct = job && job->secret_digest();
  const bool match = digests_equal(presented, direct ? *job->secret_digest() : kDummyDigest);
  return match && direct ? job : nullptr;
}

void Runner::handle_cancel(Session& session, const protocol::Request& r) {
  auto ref = protocol::parse_job_ref(*parser_, r.params_json, true);
  if (!ref) return session.send(protocol::encode_error(r.id, ref.error().code, ref.error().message));
  Job* job = visible_job(session, *ref);
  if (!job) {
    // A direct job's secret that does not open it: the one refusal of an unknown id.
    if (ref->secret) return session.send(protocol::encode_error(r.id, "unauthorized", kNoSuchJob));
    // exec-remote/v1: an unknown id is acknowledged (an idempotent tombstone: the runner mints
    // every id, so none can come to life later); another caller's job is answered the same way,
    // untouched, so the answer tells nothing of it.
    return session.send(protocol::encode_result(r.id, fmt::format("{{\"job_id\":\"{}\"}}", ref->job_id)));
  }
  if (job->state() == Job::State::kQueued) {
    admission_.remove(job->id());
    protocol::Outcome o;
    o.kind = protocol::Outcome::Kind::kCancelled;
    job->finish_unstarted(o, std::nullopt);
  } else {
    job->cancel();
  }
  session.send(protocol::encode_result(r.id, fmt::format("{{\"job_id\":\"{}\"}}", job->id())));
}

void Runner::handle_attach(Session& session, const protocol::Request& r) {
  auto ref = protocol::parse_job_ref(*parser_, r.params_json, true);
  if (!ref) return session.send(protocol::encode_error(r.id, ref.error().code, ref.error().message));
  Job* job = visible_job(session, *ref);
  if (!job) return session.send(protocol::encode_error(r.id, "unauthorized", kNoSuchJob));
  job->follow(session, r.id, ref->from_seq);
}

void Runner::handle_status(Session& session, const protocol::Request& r) {
  auto ref = protocol::parse_job_ref(*parser_, r.params_json, false);
  if (!ref) return session.send(protocol::encode_error(r.id, ref.error().code, ref.error().message));
  JsonWriter w;
  if (!ref->job_id.empty()) {
    Job* job = visible_job(session, *ref);
    if (!job) return session.send(protocol::encode_error(r.id, "unauthorized", kNoSuchJob));
    w.begin_object().field("job_id", job->id()).field("workspace_key", job->workspace_key());
    w.field("state", to_wire(job->state()));
    if (auto pos = admission_.position(job->id())) w.field("queue_position", static_cast<uint64_t>(*pos - 1));
    w.field("summary", job->summary()).field("created_at_ms", job->created_at_ms());
    if (job->terminal_json().empty()) w.field_null("terminal");
    else w.field_raw("terminal", job->terminal_json());
    w.end_object();
    return session.send(protocol::encode_result(r.id, w.str()));
  }
  w.begin_object().field("queue_depth", static_cast<uint64_t>(admission_.size()));
  w.key("running_jobs").begin_array();
  for (const Job* job : jobs_.running_jobs()) {
    if (!owns(session, *job)) continue;
    w.begin_object().field("job_id", job->id()).field("workspace_key", job->workspace_key()).field("weight", 1);
    w.field("cpus", job->cpus().list()).end_object();
  }
  w.end_array();
  // exec-remote/v1 requires both: `repositories` are the caller's compile-cache fills
  // (docs/compile-cache.md); `rustc_version` is the toolchain's `rustc --version`, "" without one.
  w.field("server_reachable", true);
  cache_fills_.write_repositories(w, session.caller(),
                                  std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch()).count());
  w.field("rustc_version", rustc_version_);
  w.end_object();
  session.send(protocol::encode_result(r.id, w.str()));
}

void Runner::handle_list(Session& session, const protocol::Request& r) {
  // The newest jobs, at most kListLimit of them, so the reply always fits in one frame.
  bool truncated = false;
  const auto visible = jobs_.newest(
      [&](const Job& job) { return owns(session, job); }, kListLimit, &truncated);
  JsonWriter w;
  w.begin_object().field("truncated", truncated).key("jobs").begin_array();
  for (const Job* job : visible) {
    w.begin_object().field("job_id", job->id()).field("caller", job->caller()).field("workspace_key", job->workspace_key());
    w.field("state", to_wire(job->state()));
    w.field("summary", job->summary()).field("created_at_ms", job->created_at_ms());
    if (job->outcome_json().empty()) w.field_null("outcome");
    else w.field_raw("outcome", job->outcome_json());
    w.end_object();
  }
  w.end_array().end_object();
  session.send(protocol::encode_result(r.id, w.str()));
}

void Runner::handle_hello(Session& session, const protocol::Request& r) {
  // (ext) "binary_output": true asks for binary output frames (protocol/output_frame.hpp).
  auto binary = protocol::parse_flag(*parser_, r.params_json, "binary_output");
  if (!binary) return session.send(protocol::encode_error(r.id, binary.error().code, binary.error().message));
  if (*binary) session.set_binary_output();
  JsonWriter w;
  w.begin_object().field("runner", "motor-runner").field("version", kVersion).field("protocol", kProtocolVersion);
  w.field("caller", session.caller()).field("binary_output", session.binary_output()).end_object();
  session.send(protocol::encode_result(r.id, w.str()));
}

void Runner::handle_identify(Session& session, const protocol::Request& r) {
  // Only the bridge (`motor-runner connect` as the bridge account, or as root) names callers.
  if (!session.may_name_callers() || session.bridged()) {
    return session.send(protocol::encode_error(r.id, "unauthorized", "only root and the SSH bridge account may name a caller"));
  }
  auto caller = protocol::parse_identify(*parser_, r.params_json);
  if (!caller) return session.send(protocol::encode_error(r.id, caller.error().code, caller.error().message));
  session.set_caller(*caller);  // from now on the session is that caller, nothing more
  if (sessions_of(session) >= static_cast<size_t>(config_.max_sessions_per_uid)) {
    session.send(protocol::encode_error(
        std::nullopt, "runner_full",
        fmt::format("caller {} has {} sessions open, the most one caller may have (max_sessions_per_uid); try again later",
                    *caller, config_.max_sessions_per_uid)));
    return session.close_after_flush();
  }
  session.send(protocol::encode_result(r.id, fmt::format("{{\"caller\":\"{}\"}}", *caller)));
}

void Runner::handle_runner_status(Session& session, const protocol::Request& r) {
  auto reset_stall = protocol::parse_flag(*parser_, r.params_json, "reset_stall");
  if (!reset_stall) return session.send(protocol::encode_error(r.id, reset_stall.error().code, reset_stall.error().message));
  auto with_metrics = protocol::parse_flag(*parser_, r.params_json, "metrics");
  if (!with_metrics) return session.send(protocol::encode_error(r.id, with_metrics.error().code, with_metrics.error().message));
  update_status();
  JsonWriter w;
  w.begin_object().field("version", kVersion).field("protocol", kProtocolVersion);
  w.field("uptime_s", static_cast<int64_t>((uv_hrtime() - started_hr_ns_) / 1000000000));
  w.field("cgroup_layout", cgroups_->layout()).field("job_account", job_account_.name);
  w.field("draining", draining_).field("shutting_down", shutting_down_);
  w.field("queue_depth", static_cast<uint64_t>(admission_.size()));
  w.key("running_jobs").begin_array();
  double claimed = 0;
  for (const Job* job : jobs_.running_jobs()) {
    claimed += static_cast<double>(job->cpus().cpus.size());
    if (!owns(session, *job)) continue;  // others' jobs: only counted
    w.begin_object().field("job_id", job->id()).field("workspace_key", job->workspace_key()).field("weight", 1);
    w.field("cpus", job->cpus().list()).field("cpus_shared", job->cpus().overlapping);
    w.field("memory_bytes", job->memory_bytes()).end_object();
  }
  w.end_array();
  w.field("cpus_total", static_cast<uint64_t>(cpu_claims_.cpu_count())).field("cpus_claimed", claimed);
  w.field("cores", static_cast<uint64_t>(cpu_claims_.core_count()))
      .field("claimed_cores", static_cast<uint64_t>(cpu_claims_.claimed_cores()));
  w.field("memory_budget_bytes", memory_budget_).field("memory_claimed_bytes", jobs_.memory_reserved());
  w.field("memory_free_bytes", memory_budget_ - jobs_.memory_reserved());
  w.field("disk_free_bytes", free_disk_bytes()).field("disk_free_floor_bytes", config_.disk_free_floor_bytes);
  w.field("jobs_known", static_cast<uint64_t>(jobs_.size())).field("sessions", static_cast<uint64_t>(sessions_.size()));
  w.field("loop_worst_stall_us", stall_.worst_us()).field("loop_worst_cpu_us", stall_.worst_cpu_us());
  w.field("client_buffered_bytes", buffered_bytes_).field("client_buffered_peak_bytes", buffered_peak_bytes_);
  w.field("sandboxes_ready", static_cast<uint64_t>(sandbox_pool_ ? sandbox_pool_->ready() : 0))
      .field("jobs_started_in_sandboxes_ready", sandbox_pool_ ? sandbox_pool_->taken() : uint64_t{0});
  if (*with_metrics) {
    metrics_.set_loop_worst_stall_seconds(static_cast<double>(stall_.worst_us()) / 1e6);
    w.field("metrics", metrics_.exposition());
  }
  w.end_object();
  if (*reset_stall) {
    stall_.reset();
    buffered_peak_bytes_ = buffered_bytes_;
  }
  session.send(protocol::encode_result(r.id, w.str()));
}


void Runner::handle_drain(Session& session, const protocol::Request& r, bool drain) {
  // Draining holds up every caller's jobs: not for one of the many callers behind the SSH bridge.
  if (session.bridged()) {
    return session.send(
        protocol::encode_error(r.id, "unauthorized", "a caller behind the SSH bridge may not drain or resume the runner"));
  }
  auto wait = protocol::parse_flag(*parser_, r.params_json, "wait");
  if (!wait) return session.send(protocol::encode_error(r.id, wait.error().code, wait.error().message));
  if (draining_ != drain) {
    draining_ = drain;
    log_info("{} by {}", drain ? "draining: new jobs are refused until resumed" : "resumed: taking new jobs",
             session.caller());
    update_status();
    if (!drain) admission_.schedule();
  }
  // The reply promises the flag survives a restart: it goes out once state.json has it.
  session.owe_reply();
  request_save(
      [this, sid = session.id(), drain, wait = *wait, request_id = r.id] {
        Session* s = find_session(sid);
        if (!s) return;
        if (drain && wait && (jobs_.running() > 0 || !admission_.empty())) {
          drain_waiters_.emplace_back(sid, request_id);  // answered once idle; the reply stays owed
          return;
        }
        s->reply_paid();
        s->send(protocol::encode_result(request_id, fmt::format(R"({{"draining":{},"running_jobs":{},"queue_depth":{}}})",
                                                                draining_, jobs_.running(), admission_.size())));
      },
      [this, sid = session.id(), request_id = r.id](const Error& e) {
        Session* s = find_session(sid);
        if (!s) return;
        s->reply_paid();
        s->send(protocol::encode_error(request_id, "runner_disk_full",
                                       "the flag is set but could not be saved yet (it is retried): " + e.message));
      });
}

void Runner::answer_drain_waiters() {
  if (drain_waiters_.empty() || jobs_.running() > 0 || !admission_.empty()) return;
  for (auto [sid, id] : std::exchange(drain_waiters_, {})) {
    Session* session = find_session(sid);
    if (!session) continue;
    session->reply_paid();
    session->send(protocol::encode_result(id, fmt::format(R"({{"draining":{},"running_jobs":0,"queue_depth":0}})", draining_)));
  }
}


}  // namespace motor::runner
