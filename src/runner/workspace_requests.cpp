// The runner's workspace.* methods and the after-job scan: glue between sessions, jobs and
// src/workspace (which does the work). docs/protocol.md "Workspaces".
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "motor/test_switches.hpp"
#include "base/job_id.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"
#include "sandbox/accounts.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::runner {

Status Runner::start_workspaces() {
  auto mirror_account = sandbox::lookup_unprivileged_account(config_.workspace_git_user);
  if (!mirror_account) {
    return make_error("config", fmt::format("workspace_git_user \"{}\": {} (scripts/setup creates motor-cache)",
                                            config_.workspace_git_user, mirror_account.error().message));
  }
  workspace::WorkspaceSettings ws;
  ws.state_dir = config_.state_dir;
  ws.workspace_root = config_.effective_workspace_root();
  ws.init_path = init_path_;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    const std::string exe(self, static_cast<size_t>(n));
    ws.sandbox_helper = exe.substr(0, exe.rfind('/')) + "/motor-workspace-sandbox";
  }
  if (access(ws.sandbox_helper.c_str(), X_OK) != 0) {
    return make_error("config", fmt::format("motor-workspace-sandbox is not at {}: it is built and installed beside "
                                            "motor-runner", ws.sandbox_helper));
  }
  if (access(ws.git.c_str(), X_OK) != 0) return make_error("config", ws.git + " is missing: install git (scripts/setup)");
  ws.job_uid = job_account_.uid;
  ws.job_gid = job_account_.gid;
  ws.mirror_uid = mirror_account->uid;
  ws.mirror_gid = mirror_account->gid;
  ws.max_bundle_bytes = config_.max_bundle_bytes;
  // Each helper run in a cgroup of its own beside the jobs' (named with this runner's pid, so the
  // start-up sweep of leftover cgroups never takes a live one; a dead runner's are swept).
  ws.helper_memory_bytes = config_.default_memory_bytes;
  // Test build only: "helper-cgroup" leaves the helpers in the runner's own cgroup, unlimited.
  if (!motor::control_weakened("helper-cgroup")) ws.helper_cgroup = [this](int64_t memory_bytes) -> Expected<std::vector<std::string>> {
    static uint64_t counter = 0;
    sandbox::CgroupLimits limits;
    limits.memory_bytes = memory_bytes;
    limits.pids_max = config_.pids_max;
    auto cg = cgroups_->create(fmt::format("{}{}", helper_cgroup_prefix(), ++counter), limits);
    if (!cg) return cg.error();
    return (*cg)->disown();  // released by its directories (release_helper_cgroup)
  };
  ws.release_helper_cgroup = [this](std::vector<std::string> dirs) { retire_cgroup(std::move(dirs), "a workspace helper"); };
  ws.warm_target = [this](const std::string& caller, const std::string& repository_root) {
    auto warm = cache_fills_.warm_target(caller, repository_root);  // docs/compile-cache.md "Warm workspaces"
    if (warm) warm->in_use = std::make_shared<TargetUses::Use>(warm_target_used(caller, repository_root));
    return warm;
  };
  ws.warm_spares = config_.warm_spares;
  ws.host_quiet = [this] { return jobs_.running() == 0 && admission_.size() == 0; };
  ws.on_warm_spare = [this](std::string_view event) { metrics_.warm_spare(event); };
  workspaces_ = std::make_unique<workspace::Workspaces>(loop_, ws, [this](const std::string& caller, const std::string& key) {
    return jobs_.running_in(caller, key);
  });
  workspaces_->set_on_idle([this] { admission_.schedule(); });
  return workspaces_->start();
}

namespace {

// Replies may come after a checkout or a scan: by session id, never by the session's address. The
// session owes the reply until it is sent (once).
workspace::Workspaces::Reply owed_reply(Runner& runner, Session& session, int64_t request_id) {
  session.owe_reply();
  return [&runner, sid = session.id(), request_id](Expected<std::string> result) {
    Session* live = runner.find_session(sid);
    if (!live) return;  // the client left; nothing to tell
    live->reply_paid();
    live->send(result ? protocol::encode_result(request_id, *result)
                      : protocol::encode_error(request_id, result.error().code, result.error().message));
  };
}

}  // namespace

void Runner::handle_workspace_prepare(Session& session, const protocol::Request& r) {
  auto p = protocol::parse_workspace_params(*parser_, r.params_json);
  if (!p) return session.send(protocol::encode_error(r.id, p.error().code, p.error().message));
  auto reply = owed_reply(*this, session, r.id);
  std::optional<workspace::Workspaces::Refusal> refusal;
  if (shutting_down_ || draining_) {
    refusal = workspace::Workspaces::Refusal{protocol::RefusalReason::kRunnerDraining, "the runner is draining and takes no new work",
                                             kRetryWhenDrainingMs};
  } else if (const int64_t free_bytes = free_disk_bytes(); free_bytes >= 0 && free_bytes < config_.disk_free_floor_bytes) {
    refusal = workspace::Workspaces::Refusal{
        protocol::RefusalReason::kRunnerDiskFull,
        fmt::format("{} MiB free on the workspace filesystem, below the floor of {} MiB", free_bytes >> 20,
                    config_.disk_free_floor_bytes >> 20),
        kRetryWhenDiskFullMs};
  }
  auto transfer_id = new_job_id();
  if (!transfer_id) return reply(make_error("internal", transfer_id.error().message));
  workspaces_->prepare(static_cast<uint64_t>(session.id()), session.caller(), *p, std::move(*transfer_id), refusal,
                       std::move(reply));
}

// workspace.upload and workspace.finish: a transfer continues only on the connection that opened it.
void Runner::handle_workspace_upload(Session& session, const protocol::Request& r) {
  auto p = protocol::parse_workspace_params(*parser_, r.params_json);
  if (!p) return session.send(protocol::encode_error(r.id, p.error().code, p.error().message));
  workspaces_->upload(static_cast<uint64_t>(session.id()), *p, owed_reply(*this, session, r.id));
}

void Runner::handle_workspace_finish(Session& session, const protocol::Request& r) {
  auto p = protocol::parse_workspace_params(*parser_, r.params_json);
  if (!p) return session.send(protocol::encode_error(r.id, p.error().code, p.error().message));
  workspaces_->finish(static_cast<uint64_t>(session.id()), session.caller(), *p, owed_reply(*this, session, r.id));
}

void Runner::handle_workspace_list(Session& session, const protocol::Request& r) {
  auto p = protocol::parse_workspace_params(*parser_, r.params_json);
  if (!p) return session.send(protocol::encode_error(r.id, p.error().code, p.error().message));
  workspaces_->list(session.caller(), owed_reply(*this, session, r.id));
}

void Runner::handle_workspace_drop(Session& session, const protocol::Request& r) {
  auto p = protocol::parse_workspace_params(*parser_, r.params_json);
  if (!p) return session.send(protocol::encode_error(r.id, p.error().code, p.error().message));
  auto reply = owed_reply(*this, session, r.id);
  if (auto st = workspace::validate_workspace_key(p->workspace_key); !st) {
    return reply(make_error("bad_request", st.error().message));
  }
  // Only the caller's own jobs in that workspace: the key names nothing of anyone else.
  // By id: ending one job may evict another finished one from the table.
  std::vector<std::string> of_workspace;
  for (const auto& [id, job] : jobs_.all()) {
    if (job->caller() == session.caller() && job->workspace_key() == p->workspace_key) of_workspace.push_back(id);
  }
  std::vector<std::string> cancelled;
  for (const auto& id : of_workspace) {
    Job* job = jobs_.find(id);
    if (!job) continue;
    if (job->state() == Job::State::kQueued) {
      admission_.remove(job->id());
      protocol::Outcome o;
      o.kind = protocol::Outcome::Kind::kCancelled;
      cancelled.push_back(job->id());
      job->finish_unstarted(o, "its workspace was dropped");
    } else if (job->state() == Job::State::kRunning) {
      cancelled.push_back(job->id());
      job->cancel();
    }
  }
  auto answer = [reply, cancelled](bool existed) {
    protocol::JsonWriter w;
    w.begin_object().field("dropped", existed).key("cancelled_jobs").begin_array();
    for (const auto& j : cancelled) w.string(j);
    w.end_array().end_object();
    reply(w.take());
  };
  if (auto st = workspaces_->drop(session.caller(), p->workspace_key, answer); !st) {
    return reply(make_error(workspaces_->busy(session.caller(), p->workspace_key) ? "workspace_busy" : "internal",
                            st.error().message));
  }
  log_info("workspace {}/{} dropped ({} jobs cancelled)", session.caller(), p->workspace_key, cancelled.size());
}

std::string Runner::helper_cgroup_prefix() { return fmt::format("ws-helper-{}-", getpid()); }

// The scan is charged the job's own memory limit: a job cannot plant more for git to load than it
// could have used itself.
// Another job of the same workspace still running could write during the scan: then no baseline
// is used or kept (docs/workspaces.md).
void Runner::scan_workspace(Job& job) {
  const bool others_running = jobs_.running_in(job.caller(), job.workspace_key(), &job);
  workspaces_->scan(job.caller(), job.workspace_key(), job.memory_bytes(), [this, id = job.id()](workspace::Workspaces::JobReport report) {
    if (Job* scanned = jobs_.find(id)) scanned->set_workspace_report(std::move(report.tree_hash), report.bundle_bytes, std::move(report.fields));
  }, others_running);
}

}  // namespace motor::runner
