// exec.run: the request checked against this runner's limits, refused at the door when the runner
// cannot take it (draining, full, disk, platform, network, screen), else recorded and queued; its
// `accepted` goes out once state.json has the job, and the job starts no earlier.
#include <sys/random.h>

#include <algorithm>
#include <cmath>

#include "reactor/slow_call.hpp"
#include "config/env_filter.hpp"
#include "base/job_id.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"
#include "base/sha256.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::runner {
namespace {

using protocol::RefusalReason;

std::string summarize(const protocol::RunParams& p) {
  std::string s;
  if (p.command) {
    s = *p.command;
  } else {
    for (const auto& a : p.argv) {
      if (!s.empty()) s.push_back(' ');
      s += a;
    }
  }
  // One line for listings and logs: whitespace runs (newlines included) become one space.
  std::string line;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (space && (line.empty() || line.back() == ' ')) continue;
    line.push_back(space ? ' ' : c);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

// A direct job's secret: 256 bits from the OS, as hex; the raw bytes are wiped.
Expected<std::string> new_secret() {
  uint8_t raw[32];
  if (getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) return make_error("internal", "getrandom failed");
  Sha256Digest bytes;
  std::copy(std::begin(raw), std::end(raw), bytes.begin());
  std::string secret = to_hex(bytes);
  explicit_bzero(raw, sizeof raw);
  explicit_bzero(bytes.data(), bytes.size());
  return secret;
}

}  // namespace

void Runner::refuse_job(Session& session, int64_t request_id, RefusalReason reason, const std::string& detail,
                        std::optional<int64_t> retry_after_ms) {
  metrics_.refused(to_wire(reason));
  protocol::TerminalRecord t;
  auto id = new_job_id();
  t.job_id = id ? *id : "";
  t.outcome = protocol::refused(reason);
  t.ran = protocol::Ran::kNone;
  t.refusal_detail = detail.substr(0, 1024);
  t.retry_after_ms = retry_after_ms;
  session.send(protocol::with_request_id(request_id, protocol::encode_terminal(t)));
}

void Runner::refuse_unrecorded(const std::string& job_id, SessionId session_id, int64_t request_id, const Error& e) {
  Job* job = jobs_.find(job_id);
  if (!job) return;
  log_warning("job {}: refused, it could not be recorded: {}", job_id, e.message);
  refuse_for_its_record(*job, "the runner could not record the job: " + e.message, kRetryWhenDiskFullMs);
  Session* session = find_session(session_id);
  if (!session) return;
  // Refused in the queue: its terminal record now. Its sandbox was being built (its command waits
  // for the record): once that is killed and gone, its terminal record is the only one the caller
  // gets, as the reply to its exec.run.
  if (job->state() == Job::State::kFinished) return session->send(protocol::with_request_id(request_id, job->terminal_json()));
  job->follow(*session, request_id, 1);
}

void Runner::refuse_for_its_record(Job& job, std::string detail, std::optional<int64_t> retry_after_ms) {
  admission_.remove(job.id());
  metrics_.refused(to_wire(RefusalReason::kRunnerDiskFull));
  job.refuse_unrecorded(RefusalReason::kRunnerDiskFull, std::move(detail), retry_after_ms);
}

void Runner::job_recorded(const std::string& job_id) {
  admission_.recorded(job_id);
  if (Job* job = jobs_.find(job_id)) job->on_record();
}

bool Runner::may_start_before_record(const PendingStart& pending) const {
  // A Linux job's command waits at its gate for the record (Job::on_record); a VM boots nothing
  // before it.
  return pending.params.platform == protocol::Platform::kLinux;
}

void Runner::handle_run(Session& session, const protocol::Request& r) {
  auto params = protocol::parse_run_params(*parser_, r.params_json, static_cast<size_t>(config_.max_argument_bytes));
  if (!params) return session.send(protocol::encode_error(r.id, params.error().code, params.error().message));
  auto host = parse_host_workspace(*parser_, r.params_json, session.privileged(), config_.bb_build_directory);
  if (!host) return session.send(protocol::encode_error(r.id, host.error().code, host.error().message));
  PriorityClass priority = PriorityClass::kBatch;
  auto pending = check_run(session, r, std::move(*params), &priority);
  if (!pending) return;  // answered
  pending->host_workspace = std::move(*host);
  auto tip = parse_fill_tip(*parser_, r.params_json);
  if (!tip) return session.send(protocol::encode_error(r.id, tip.error().code, tip.error().message));
  if (refused_at_the_door(session, r, pending->params)) return;
  // A verified default-branch tip may start its repository's cache fill, queued behind this job.
  const std::string caller = session.caller();
  const protocol::RunParams fill_from = *tip ? pending->params : protocol::RunParams{};
  accept_job(session, r.id, std::move(*pending), priority);
  if (*tip) maybe_start_fill(caller, fill_from, **tip);
}

std::optional<PendingStart> Runner::check_run(Session& session, const protocol::Request& r, protocol::RunParams p,
                                              PriorityClass* priority) {
  auto bad = [&](const std::string& message) -> std::optional<PendingStart> {
    session.send(protocol::encode_error(r.id, "bad_request", message));
    return std::nullopt;
  };
  if (p.direct && !config_.direct_jobs) return bad("direct jobs are not enabled on this runner (direct_jobs = false)");
  // exec-remote/v1: an absolute cwd is inside the workspace, which a path key names (a git
  // worktree need not lie inside repository_root); Motor's short keys: inside repository_root.
  const bool path_key = workspace::is_path_key(p.workspace_key);
  auto rel = workspace::relative_cwd(workspace::cwd_checkout(p.workspace_key, p.repository_root), p.cwd,
                                     path_key ? "the workspace (workspace_key)" : "repository_root");
  if (!rel) {
    session.send(protocol::encode_error(r.id, rel.error().code, rel.error().message));
    return std::nullopt;
  }
  const int64_t timeout_s = p.timeout_s.value_or(config_.default_timeout_s);
  if (timeout_s > config_.max_timeout_s) {
    return bad(fmt::format("timeout {} s is over this runner's maximum of {} s", timeout_s, config_.max_timeout_s));
  }
  const int64_t memory = p.memory_bytes.value_or(config_.default_memory_bytes);
  if (memory > config_.max_memory_bytes || memory > memory_budget_) {
    return bad(fmt::format("memory {} bytes is over this runner's maximum of {} bytes", memory,
                           std::min(config_.max_memory_bytes, memory_budget_)));
  }
  // weight_hint scales the default claim (within 1 .. the host's CPUs) when cpus is not given.
  int64_t cpus = p.cpus.value_or(config_.default_cpus);
  if (!p.cpus && p.weight_hint && *p.weight_hint > 0) {
    cpus = std::clamp<int64_t>(std::llround(static_cast<double>(config_.default_cpus) * *p.weight_hint), 1,
                               static_cast<int64_t>(cpu_claims_.cpu_count()));
  }
  if (cpus > static_cast<int64_t>(cpu_claims_.cpu_count())) {
    return bad(fmt::format("cpus {} is more than this host's {} CPUs", cpus, cpu_claims_.cpu_count()));
  }
  *priority = p.priority == protocol::Priority::kInteractive ? PriorityClass::kInteractive : PriorityClass::kBatch;
  return PendingStart{std::move(p), std::move(*rel), timeout_s, memory, cpus, std::nullopt, {}, std::nullopt};
}

bool Runner::refused_at_the_door(Session& session, const protocol::Request& r, const protocol::RunParams& p) {
  auto refuse = [&](RefusalReason reason, const std::string& detail, std::optional<int64_t> retry = std::nullopt) {
    refuse_job(session, r.id, reason, detail, retry);
    return true;
  };
  if (shutting_down_ || draining_) {
    return refuse(RefusalReason::kRunnerDraining, "the runner is draining and takes no new jobs", kRetryWhenDrainingMs);
  }
  // Never downgraded or upgraded: a string this runner does not know is refused, naming it.
  if (p.unknown_platform) return refuse(RefusalReason::kPlatformUnsupported, *p.unknown_platform);
  if (p.unknown_network) return refuse(RefusalReason::kNetworkUnsupported, *p.unknown_network);
  if (p.platform == protocol::Platform::kWindows && vm_host_ && vm_host_->unavailable()) {
    return refuse(RefusalReason::kPlatformUnsupported, *vm_host_->unavailable());
  }
  if (p.network != protocol::Network::kOffline && !outbound_) {
    return refuse(RefusalReason::kNetworkUnsupported,
                  "outbound network access is not enabled on this runner (outbound_network = false)");
  }
  if (auto s = workspace::validate_workspace_key(p.workspace_key); !s) {
    return refuse(RefusalReason::kWorkspaceKeyRejected, s.error().message);
  }
  if (p.untrusted) {  // (ext) only workspaces whose change passed the screen (docs/change-screen.md)
    std::vector<std::string> keys = p.siblings;
    keys.insert(keys.begin(), p.workspace_key);
    for (const auto& key : keys) {
      if (auto why = workspaces_->unscreened_reason(session.caller(), key); !why.empty()) {
        return refuse(RefusalReason::kScreenRefused, fmt::format("workspace \"{}\": {}", key, why));
      }
    }
  }
  if (const int64_t free_bytes = free_disk_bytes(); free_bytes >= 0 && free_bytes < config_.disk_free_floor_bytes) {
    return refuse(RefusalReason::kRunnerDiskFull,
                  fmt::format("{} MiB free on the workspace filesystem, below the floor of {} MiB", free_bytes >> 20,
                              config_.disk_free_floor_bytes >> 20),
                  kRetryWhenDiskFullMs);
  }
  if (auto room = state_room(); !room) return refuse(RefusalReason::kRunnerDiskFull, room.error().message, kRetryWhenDiskFullMs);
  if (admission_.full()) {
    return refuse(RefusalReason::kRunnerFull, fmt::format("{} jobs are queued, the most this runner holds", admission_.size()),
                  kRetryWhenFullMs);
  }
  return false;
}

void Runner::accept_job(Session& session, int64_t request_id, PendingStart pending, PriorityClass priority) {
  reactor::SlowCall timed("accepting a job", reactor::SlowCall::kTraceOnly);
  const protocol::RunParams& p = pending.params;
  auto id = new_job_id();
  if (!id) return session.send(protocol::encode_error(request_id, "internal", id.error().message));
  auto job = std::make_unique<Job>(*this, *id, session.caller(), p.workspace_key, record_settings(*id));
  if (auto s = job->enqueue(summarize(p)); !s) {
    return refuse_job(session, request_id, RefusalReason::kWorkspaceSetupFailed, s.error().message);
  }
  // Sent once in `accepted` on this connection; only its digest is kept (state.json), the
  // plaintext is wiped once it is on its way.
  std::string secret;
  if (p.direct) {
    auto made = new_secret();
    if (!made) return session.send(protocol::encode_error(request_id, "internal", made.error().message));
    secret = std::move(*made);
    job->set_secret_digest(sha256(secret));
  }
  jobs_.add(std::move(job));

  QueueEntry entry;
  entry.job_id = *id;
  entry.priority = priority;
  entry.cpus = pending.cpus;
  entry.memory_bytes = pending.memory_bytes;
  // A VM job also reserves what QEMU itself may use (its memory cgroup's hard limit).
  if (p.platform == protocol::Platform::kWindows && vm_host_) entry.memory_bytes += vm_host_->memory_overhead();
  entry.enqueued_ms = uv_now(loop_);
  const int64_t wait_limit_s = std::min(p.queue_wait_limit_s.value_or(config_.queue_wait_limit_s), config_.queue_wait_limit_s);
  entry.deadline_ms = entry.enqueued_ms + static_cast<uint64_t>(wait_limit_s) * 1000;

  protocol::AcceptedRecord a;
  a.job_id = *id;
  // A host_workspace job's environment is as given (host_workspace.hpp): nothing is held back.
  auto filtered = config::filter_env(p.env, config_.env_allow);
  if (!pending.host_workspace) a.env_not_forwarded = std::move(filtered.not_forwarded);
  pending.forwarded_env = std::move(filtered.forwarded);
  a.platform = p.platform;
  a.network = p.network;
  if (p.direct) a.secret = std::move(secret);
  const size_t position = admission_.enqueue(std::move(entry), std::move(pending));  // `p` is gone now
  a.queue_position = static_cast<int64_t>(position - 1);  // 0: next to start
  auto accepted = std::make_shared<std::string>(protocol::encode_accepted(a));
  if (a.secret) explicit_bzero(a.secret->data(), a.secret->size());
  explicit_bzero(secret.data(), secret.size());
  // `accepted` promises the job is on record: it goes out once the job table says so, and the
  // job's command runs no earlier (its sandbox may be built meanwhile: Job::on_record). If that
  // save fails (a full disk), the job is refused instead.
  session.owe_reply();
  request_save(
      [this, sid = session.id(), request_id, accepted, job_id = *id] {
        if (Session* s = find_session(sid)) {
          s->reply_paid();
          s->send(protocol::with_request_id(request_id, *accepted), Session::kSensitive);
          if (Job* accepted_job = jobs_.find(job_id)) accepted_job->follow(*s, request_id, 1);
        }  // else the client left; the job runs on, attachable later
        if (Job* recorded_job = jobs_.find(job_id)) recorded_job->mark_start_step(StartSteps::kRecorded);
        explicit_bzero(accepted->data(), accepted->size());
        job_recorded(job_id);
      },
      [this, sid = session.id(), request_id, accepted, job_id = *id](const Error& e) {
        explicit_bzero(accepted->data(), accepted->size());
        if (Session* s = find_session(sid)) s->reply_paid();
        refuse_unrecorded(job_id, sid, request_id, e);
      });
  admission_.schedule();
  update_status();
}

}  // namespace motor::runner
