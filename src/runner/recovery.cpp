// Start-up recovery: what an earlier runner left in its job table (state.db, or a state.json
// it migrates), the job logs and the cgroup parent. Finished jobs come back as they were; queued ones are outcome_unknown (ran "none");
// running ones are killed and recorded as outcome_unknown unless their log holds their terminal record;
// cgroups no record names are killed and removed.
#include <algorithm>

#include "base/log.hpp"
#include "runner/runner.hpp"
#include "base/sha256.hpp"

namespace motor::runner {
namespace {

// At start-up only (before the loop serves anyone): kills what a dead runner left in a job
// cgroup, waits up to 10 s for it to empty, and removes it; reap_now kills on each attempt
// (cgroup.kill, or SIGKILL to every pid listed), so nothing is killed twice. One still busy after
// that goes to the reaper when the handle is dropped.
Status kill_and_remove(sandbox::JobCgroup& cg) { return sandbox::reap_now(sandbox::remains_of(cg, cg.name()), 10000); }

}  // namespace

void Runner::restore_job(const PersistedJob& pj, std::string terminal_json) {
  Job& job = jobs_.add(Job::restore(*this, pj.job_id, pj.caller, pj.workspace_key, record_settings(pj.job_id), pj.summary,
                                    pj.created_at_ms, std::move(terminal_json)));
  Sha256Digest d{};
  if (!pj.secret_sha256.empty() && from_hex(pj.secret_sha256, d)) job.set_secret_digest(d);
}

Status Runner::recover() {
  auto state = load_state(config_.state_dir);
  if (!state) return state.error();
  draining_ = state->draining;
  std::set<std::string> known_cgroups;
  const std::vector<std::string> existing_cgroups = cgroups_->list();
  for (auto& pj : state->jobs) {
    if (!protocol::is_job_id(pj.job_id)) {
      jobs_.note_removed(pj.job_id);  // never loaded: its row goes with the first save
      continue;
    }
    if (pj.state == PersistedJob::State::kFinished && !pj.terminal_json.empty()) {
      restore_job(pj, pj.terminal_json);
      jobs_.mark_saved(pj.job_id);  // its row is what it was: nothing to write again
      continue;
    }
    if (pj.state == PersistedJob::State::kQueued) {
      // The job table is written asynchronously: a job may have started after its last save said
      // "queued". If its cgroup exists (made just before the spawn) or its log has records, it
      // may have run: it is accounted for like a running one, never as "not started".
      const std::string cgroup = "job-" + pj.job_id;
      const bool has_cgroup = std::find(existing_cgroups.begin(), existing_cgroups.end(), cgroup) != existing_cgroups.end();
      auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes);
      if (has_cgroup || (log && log->last_seq() > 0)) {
        pj.state = PersistedJob::State::kRunning;
        pj.cgroup = cgroup;
      }
    }
    if (pj.state == PersistedJob::State::kQueued) recover_queued(pj);
    else recover_unfinished(pj, known_cgroups);
  }
  // Job cgroups that no record names (the runner died between creating one and saving state).
  for (const auto& name : existing_cgroups) {
    if (known_cgroups.count(name) || name.starts_with(helper_cgroup_prefix())) continue;  // this runner's helper
    if (auto cg = cgroups_->open(name)) {
      log_warning("removing the leftover cgroup {}", name);
      if (auto s = kill_and_remove(**cg); !s) log_warning("removing the leftover cgroup {}: {}", name, s.error().message);
    }
  }
  return {};
}

bool Runner::recovered_workspace_fields(const PersistedJob& pj, protocol::TerminalRecord& t) {
  // No prepare can have run while the job was queued or running (prepare waits for its jobs):
  // the workspace holds the tree the job was to run against.
  auto tree = workspaces_->prepared(pj.caller, pj.workspace_key);
  if (!tree) return false;
  t.tree_hash = tree->tree;
  t.bundle_bytes = tree->bundle_bytes;
  return true;
}

// Queued when the runner died: exec-remote/v1 grades it outcome_unknown (ran "none": its
// cgroup and log say it did not start), never a refusal, which would be a before-start proof
// the runner cannot give for a job whose state.json may lag behind.
void Runner::recover_queued(PersistedJob& pj) {
  protocol::TerminalRecord t;
  t.job_id = pj.job_id;
  t.outcome.kind = protocol::Outcome::Kind::kOutcomeUnknown;
  t.ran = protocol::Ran::kNone;
  recovered_workspace_fields(pj, t);
  std::string terminal;
  if (auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes)) {
    t.seq = log->last_seq() + 1;
    terminal = protocol::encode_terminal(t);
    (void)log->append(JobLog::Kind::kRecord, terminal);
  } else {
    terminal = protocol::encode_terminal(t);
  }
  metrics_.job_finished("outcome_unknown");
  log_warning("job {} was queued when the runner stopped; it is recorded as outcome_unknown (it did not start)", pj.job_id);
  restore_job(pj, std::move(terminal));
}

// A job of a runner that died: kill whatever is left of it, and say we do not know how it ended
// rather than lose it.
void Runner::recover_unfinished(PersistedJob& pj, std::set<std::string>& known_cgroups) {
  if (!pj.cgroup.empty()) {
    known_cgroups.insert(pj.cgroup);
    if (auto cg = cgroups_->open(pj.cgroup)) {
      if (auto s = kill_and_remove(**cg); !s) log_warning("job {}: removing its cgroup: {}", pj.job_id, s.error().message);
    }
  }
  protocol::TerminalRecord t;
  t.job_id = pj.job_id;
  t.outcome.kind = protocol::Outcome::Kind::kOutcomeUnknown;
  t.ran = protocol::Ran::kRemote;
  auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes);
  if (!log) return record_unfinished(pj, protocol::encode_terminal(t), true);
  // The job may have ended and had its terminal record logged just before the crash.
  if (auto logged = log->last_terminal()) return record_unfinished(pj, std::move(*logged), false);
  if (!recovered_workspace_fields(pj, t)) return log_unknown_terminal(pj, std::move(t));
  // It ran on its workspace: what it changed there is scanned first, a child on the loop like
  // any scan (bounded by its own timeout); the runner listens once every such scan has ended.
  ++recovery_scans_;
  workspaces_->scan(pj.caller, pj.workspace_key, 0, [this, pj, t](workspace::Workspaces::JobReport r) mutable {
    t.workspace = std::move(r.fields);
    log_unknown_terminal(pj, std::move(t));
    if (--recovery_scans_ == 0 && awaiting_recovery_) finish_start();
  });
}

void Runner::log_unknown_terminal(const PersistedJob& pj, protocol::TerminalRecord t) {
  std::string terminal;
  if (auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes)) {
    t.seq = log->last_seq() + 1;
    terminal = protocol::encode_terminal(t);
    if (auto seq = log->append(JobLog::Kind::kRecord, terminal); !seq) log_warning("job {}: {}", pj.job_id, seq.error().message);
  } else {
    terminal = protocol::encode_terminal(t);
  }
  record_unfinished(pj, std::move(terminal), true);
}

void Runner::record_unfinished(const PersistedJob& pj, std::string terminal, bool unknown) {
  if (unknown) metrics_.job_finished("outcome_unknown");
  log_warning("job {} was running when the runner stopped; its processes were killed; outcome: {}", pj.job_id,
              unknown ? "unknown" : "recorded before the stop");
  restore_job(pj, std::move(terminal));
}

}  // namespace motor::runner
