// The runner's workspace.* methods and the after-job scan: glue between sessions, jobs and
// src/workspace (which does the work). docs/protocol.md "Workspaces".
#include <unistd.h>

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
    return (*cg)->directories();
  };
  ws.release_helper_cgroup = [this](std::vector<std::string> dirs) { retire_cgroup(std::move(dirs), "a workspace helper"); };
  workspaces_ = std::make_unique<workspace::Workspaces>(loop_, ws, [this](const std::string& caller, const std::string& key) {
    for (const auto& [id, job] : jobs_) {
      if (job->state() == Job::State::kRunning && job->caller() == caller && job->workspace_key() == key) return true;
    }
    return false;
  });
  workspaces_->set_on_idle([this] { schedule_admission(); });
  return workspaces_->start();
}

void Runner::handle_workspace(Session& session, const protocol::Request& r) {
  auto p = protocol::parse_workspace_params(parser_, r.params_json);
  if (!p) return session.send(protocol::encode_error(r.id, p.error().code, p.error().message));
  // Replies may come after a checkout or a scan: by id, never by the session's address.
  const uint64_t s = static_cast<uint64_t>(session.id());
  session.owe_reply();  // paid by the reply, which is sent once
  auto reply = [this, sid = session.id()](std::string json) {
    Session* live = find_session(sid);
    if (!live) return;  // the client left; nothing to tell
    live->reply_paid();
    live->send(std::move(json));
  };
  const std::string& m = r.method;
  if (m == "workspace.prepare") {
    std::optional<workspace::Workspaces::Refusal> refusal;
    if (shutting_down_ || draining_) {
      refusal = workspace::Workspaces::Refusal{"runner_draining", "the runner is draining and takes no new work",
                                               kRetryWhenDrainingMs};
    } else if (const int64_t free_bytes = free_disk_bytes(); free_bytes >= 0 && free_bytes < config_.disk_free_floor_bytes) {
      refusal = workspace::Workspaces::Refusal{
          "runner_disk_full",
          fmt::format("{} MiB free on the workspace filesystem, below the floor of {} MiB", free_bytes >> 20,
                      config_.disk_free_floor_bytes >> 20),
          kRetryWhenDiskFullMs};
    }
    auto transfer_id = new_job_id();
    if (!transfer_id) return reply(protocol::encode_error(r.id, "internal", transfer_id.error().message));
    return workspaces_->prepare(s, session.caller(), r.id, *p, std::move(*transfer_id), refusal, std::move(reply));
  }
  if (m == "workspace.upload") return workspaces_->upload(s, r.id, *p, std::move(reply));
  if (m == "workspace.finish") return workspaces_->finish(s, session.caller(), r.id, *p, std::move(reply));
  if (m == "workspace.list") return workspaces_->list(session.caller(), r.id, std::move(reply));
  if (m == "workspace.drop") {
    if (auto st = workspace::validate_workspace_key(p->workspace_key); !st) {
      return reply(protocol::encode_error(r.id, "bad_request", st.error().message));
    }
    // Only the caller's own jobs in that workspace: the key names nothing of anyone else.
    std::vector<std::string> cancelled;
    for (auto& [id, job] : jobs_) {
      if (job->caller() != session.caller() || job->workspace_key() != p->workspace_key) continue;
      if (job->state() == Job::State::kQueued) {
        queue_.remove(id);
        pending_.erase(id);
        protocol::Outcome o;
        o.kind = protocol::Outcome::Kind::kCancelled;
        cancelled.push_back(id);
        job->finish_unstarted(o, "its workspace was dropped");
      } else if (job->state() == Job::State::kRunning) {
        cancelled.push_back(id);
        job->cancel();
      }
    }
    auto answer = [reply, id = r.id, cancelled](bool existed) {
      protocol::JsonWriter w;
      w.begin_object().field("dropped", existed).key("cancelled_jobs").begin_array();
      for (const auto& j : cancelled) w.string(j);
      w.end_array().end_object();
      reply(protocol::encode_result(id, w.str()));
    };
    if (auto st = workspaces_->drop(session.caller(), p->workspace_key, answer); !st) {
      return reply(protocol::encode_error(r.id, st.error().code == "workspace_busy" ? "workspace_busy" : "internal",
                                                 st.error().message));
    }
    log_info("workspace {}/{} dropped ({} jobs cancelled)", session.caller(), p->workspace_key, cancelled.size());
    return;
  }
  reply(protocol::encode_error(r.id, "bad_request", fmt::format("unknown method \"{}\"", m.substr(0, 64))));
}

std::string Runner::helper_cgroup_prefix() { return fmt::format("ws-helper-{}-", getpid()); }

// The scan is charged the job's own memory limit: a job cannot plant more for git to load than it
// could have used itself.
void Runner::scan_workspace(Job& job) {
  workspaces_->scan(job.caller(), job.workspace_key(), job.memory_bytes(), [this, id = job.id()](workspace::Workspaces::JobReport report) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    it->second->set_workspace_report(std::move(report.tree_hash), report.bundle_bytes, std::move(report.fields));
  });
}

}  // namespace motor::runner
