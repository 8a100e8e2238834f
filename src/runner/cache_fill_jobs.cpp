// Compile-cache fills as jobs (docs/compile-cache.md): a run that reports a verified
// default-branch tip the runner has not built queues one fill job per repository, shown in
// exec.status as `base:<repository_root>`, in the lowest admission class, started like any Linux
// job but as motor-cache, with the shared caches writable and the mirror of the tip's tree
// read-only at /mirror. Its end publishes the warm target (cache_fill.hpp).
#include <grp.h>


#include <fmt/format.h>

#include "base/job_id.hpp"
#include "base/log.hpp"
#include "runner/job_sandbox_policy.hpp"
#include "runner/runner.hpp"
#include "workspace/child_process.hpp"

namespace motor::runner {
namespace {

constexpr const char* kFillMirrorInJob = "/mirror";
constexpr const char* kFillMetaInJob = "/fill";  // fills/<hash>/: the fill's index and published.new
constexpr const char* kFillKeyPrefix = "base:";

std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The fill's script. Its tree is checked out at /workspace and built there, with the target at
// /workspace/target: the absolute paths a caller's job sees for the same tree, which cargo's
// fingerprints and dep-info hold, so a copy of the target is fresh in a caller's workspace
// (docs/compile-cache.md "Warm workspaces"). The tree comes from the mirror (read-tree with the
// fill's own index in /fill rewrites only what changed, so the target kept from the last fill
// stays incremental); then the configured build, then a copy of the target (a reflink where the
// filesystem has them) to be published, readable by the job account that copies it into a new
// workspace (rustc's lock files are 0600; the targets directory itself is root's, 0700). src/
// and target/ in /fill are an older layout's.
std::string fill_script(const std::string& command, const std::string& commit) {
  return fmt::format(
      "set -e; cd /workspace; export GIT_INDEX_FILE={0}/tree.index CARGO_TARGET_DIR=/workspace/target; "
      "rm -rf {0}/src {0}/target {0}/index {0}/published.new; "
      "git --git-dir={1} --work-tree=/workspace read-tree -u --reset {2}; mkdir -p target; "
      "/bin/sh -c {3}; cp -a --reflink=auto target {0}/published.new; chmod -R a+rX {0}/published.new",
      kFillMetaInJob, kFillMirrorInJob, commit, shell_quoted(command));
}

}  // namespace

Status Runner::start_cache_fills() {
  cache_fills_ = CacheFills(config_.state_dir + "/cache");
  if (auto s = cache_fills_.open(); !s) return s;
  if (config_.cache_fill_command.empty()) return {};
  auto account = sandbox::lookup_unprivileged_account(config_.workspace_git_user);
  if (!account) {
    return make_error("config", fmt::format("cache fills run as {}: {} (scripts/setup creates motor-cache; "
                                            "cache_fill_command = \"\" turns fills off)",
                                            config_.workspace_git_user, account.error().message));
  }
  cache_account_ = *account;
  const group* g = getgrgid(cache_account_.gid);
  cache_group_name_ = g ? g->gr_name : cache_account_.name;
  // The toolchain fills use, for exec.status: asked once, off the loop.
  reactor::ChildSpec spec;
  spec.file = "/bin/sh";
  spec.argv = {"sh", "-c", "exec rustc --version"};
  spec.env = {"PATH=" + std::string(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin")};
  spec.timeout_ms = 30000;
  workspace::run_child(loop_, std::move(spec), [this](workspace::ChildResult r) {
    if (!r.ok()) return;
    rustc_version_ = r.out.substr(0, r.out.find('\n'));
  });
  return {};
}

void Runner::maybe_start_fill(const std::string& caller, const protocol::RunParams& p, const FillTip& tip) {
  if (config_.cache_fill_command.empty() || p.platform != protocol::Platform::kLinux) return;
  if (!cache_fills_.wants(caller, p.repository_root, tip.commit)) return;
  // The client reports a tip only when the workspace it prepared holds exactly the tip's tree.
  const auto tree = workspaces_->prepared(caller, p.workspace_key);
  const std::string mirror = workspaces_->prepared_mirror(caller, p.workspace_key);
  if (!tree || mirror.empty() || tree->repository_root != p.repository_root) return;
  auto id = new_job_id();
  if (!id) return log_error("no cache fill for {}: {}", p.repository_root, id.error().message);
  protocol::RunParams fill;
  fill.workspace_key = kFillKeyPrefix + p.repository_root;
  fill.repository_root = p.repository_root;
  fill.command = fill_script(config_.cache_fill_command, tree->commit);
  fill.network = config_.cache_fill_network && outbound_ ? protocol::Network::kOutbound : protocol::Network::kOffline;
  auto job = std::make_unique<Job>(*this, *id, caller, fill.workspace_key, record_settings(*id));
  if (auto s = job->enqueue(fmt::format("cache fill of {} at {}", p.repository_root, tip.commit.substr(0, 12))); !s) {
    return log_error("no cache fill for {}: {}", p.repository_root, s.error().message);
  }
  jobs_.add(std::move(job));
  QueueEntry entry;
  entry.job_id = *id;
  entry.priority = PriorityClass::kFill;
  entry.cpus = config_.default_cpus;
  entry.memory_bytes = config_.default_memory_bytes;
  entry.enqueued_ms = uv_now(loop_);
  entry.deadline_ms = entry.enqueued_ms + static_cast<uint64_t>(config_.queue_wait_limit_s) * 1000;
  PendingStart pending{std::move(fill), "", config_.max_timeout_s, config_.default_memory_bytes, config_.default_cpus,
                       std::nullopt, {}, FillStart{p.repository_root, tip.commit, tree->commit, mirror}};
  cache_fills_.started(caller, p.repository_root, tip.commit, tree->commit, *id);
  cache_fills_.mark_used(cache_fills_.name_of(caller, p.repository_root), unix_now_ms());
  metrics_.cache_fill_started();
  log_info("job {}: cache fill of {} at {} queued", *id, p.repository_root, tip.commit);
  admission_.enqueue(std::move(entry), std::move(pending));
  // Like a caller's job, it starts once the job table has it.
  request_save([this, job_id = *id] { job_recorded(job_id); },
               [this, job_id = *id](const Error& e) {
                 if (Job* unrecorded = jobs_.find(job_id)) refuse_for_its_record(*unrecorded, e.message, std::nullopt);
               });
  admission_.schedule();
}

void Runner::start_fill_job(Job& job, const PendingStart& pending) {
  auto dir = cache_fills_.fill_dir(job.caller(), pending.fill->repository_root, cache_account_.uid, cache_account_.gid);
  if (!dir) return refuse_queued(job, protocol::RefusalReason::kWorkspaceSetupFailed, dir.error().message);
  start_linux_job(job, pending, *dir);
}

void Runner::fill_sandbox(const FillStart& fill, sandbox::SandboxConfig& box) const {
  // The fill alone writes the shared caches; it reads the tree from the mirror.
  for (const auto& cache : config_.cache_paths) {
    std::erase_if(box.overlaid, [&](const sandbox::BindMount& b) { return b.source == cache; });
    box.writable.push_back({cache, cache});
  }
  box.read_only.push_back({fill.mirror, kFillMirrorInJob});
  // Its /workspace is fills/<hash>/tree; the directory above it holds its index and the copy.
  const std::string& tree = box.workspace.source;
  box.writable.push_back({tree.substr(0, tree.rfind('/')), kFillMetaInJob});
}

void Runner::fill_finished(Job& job) {
  if (!cache_fills_.is_fill(job.id())) return;
  const auto& outcome = job.outcome();
  const bool succeeded = outcome.kind == protocol::Outcome::Kind::kExit && outcome.code == 0;
  const RepositoryFill fill = *cache_fills_.of_job(job.id());  // a copy: finished() changes it
  auto replaced = cache_fills_.finished(job.id(), succeeded, unix_now_ms());
  metrics_.cache_fill_finished(replaced ? "ok" : "failed");
  sweep_cache();  // what the fill added counts against cache_max_size now
  if (!replaced) return log_info("job {}: cache fill failed: {}", job.id(), replaced.error().message);
  log_info("job {}: cache fill published", job.id());
  workspaces_->warm_target_changed(fill.caller, fill.repository_root);
  if (replaced->empty()) return;
  remove_in_cache(*replaced);
}

}  // namespace motor::runner
