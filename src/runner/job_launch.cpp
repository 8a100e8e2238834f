// From the admission queue to a running job: whether a job fits now, and what it runs in (its
// workspace directory, its sandbox policy or its VM, its CPUs and network), then Job::start.
#include <sys/stat.h>

#include "motor/test_switches.hpp"
#include "reactor/slow_call.hpp"
#include "config/env_filter.hpp"
#include "runner/job_sandbox_policy.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::runner {

using protocol::RefusalReason;

bool Runner::waits_on_workspace(const std::string& job_id) const {
  const Job* job = jobs_.find(job_id);
  return job && workspaces_->busy(job->caller(), job->workspace_key());
}

bool Runner::has_room_for(const QueueEntry& e) const {
  return jobs_.running() < static_cast<size_t>(config_.max_running_jobs) &&
         jobs_.memory_reserved() + e.memory_bytes <= memory_budget_ &&
         cpu_claims_.can_claim(e.cpus, config_.cpu_oversubscription);
}

void Runner::queue_wait_exceeded(const std::string& job_id) {
  if (Job* job = jobs_.find(job_id)) {
    refuse_queued(*job, RefusalReason::kQueueWaitExceeded, "the job waited in the queue for its whole queue-wait limit");
  }
}

void Runner::refuse_queued(Job& job, RefusalReason reason, const std::string& detail, std::optional<int64_t> retry_after_ms) {
  metrics_.refused(to_wire(reason));
  job.finish_unstarted(protocol::refused(reason), detail.substr(0, 1024), retry_after_ms);  // job_finished frees its claim
}

void Runner::job_start_failed(Job& job, const std::string& detail) {
  refuse_queued(job, RefusalReason::kWorkspaceSetupFailed, detail);
}

void Runner::start_admitted(const std::string& job_id, PendingStart pending) {
  Job* job = jobs_.find(job_id);
  if (!job) return;
  job->mark_start_step(StartSteps::kAdmitted);
  if (pending.fill) {  // a compile-cache fill: its own directory, as motor-cache (cache_fill_jobs.cpp)
    start_fill_job(*job, pending);
    return update_status();
  }
  const protocol::RunParams& p = pending.params;
  const std::string& rel = pending.rel_cwd;
  reactor::SlowCall timed("starting a job");
  const auto& host = pending.host_workspace;  // (ext) a Buildbarn input root: host_workspace.hpp
  auto ws = [&] {
    reactor::SlowCall timed_dir("finding the job's workspace directory", reactor::SlowCall::kTraceOnly);
    return host ? resolve_host_dir(config_.bb_build_directory, host->input_root)
                : workspace::ensure_workspace_dir(config_.effective_workspace_root(), job->caller(), p.workspace_key,
                                                  job_account_.uid, job_account_.gid);
  }();
  if (!ws) return refuse_queued(*job, RefusalReason::kWorkspaceSetupFailed, ws.error().message);
  // Resolved inside the workspace only: a symlink the job planted never makes the answer depend on
  // the host (test build only: "cwd-beneath" falls back to a plain stat as root).
  if (motor::control_weakened("cwd-beneath")) {
    struct stat st {};
    const std::string cwd = rel.empty() ? *ws : *ws + "/" + rel;
    if (stat(cwd.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) {
      return refuse_queued(*job, RefusalReason::kWorkspaceSetupFailed,
                           "the working directory \"" + rel + "\" does not exist in the workspace");
    }
  } else if (auto st = [&] {
               reactor::SlowCall timed_cwd("checking the job's working directory", reactor::SlowCall::kTraceOnly);
               return workspace::check_dir_beneath(*ws, rel);
             }();
             !st) {
    return refuse_queued(*job, RefusalReason::kWorkspaceSetupFailed, st.error().message);
  }
  if (p.platform == protocol::Platform::kWindows) {
    if (!start_vm_job(*job, pending, *ws)) {
      return refuse_queued(*job, RefusalReason::kWorkspaceSetupFailed, "the VM job could not be started");
    }
    return update_status();
  }
  start_linux_job(*job, pending, *ws);
  update_status();
}

void Runner::start_linux_job(Job& job, const PendingStart& pending, const std::string& workspace_dir) {
  const protocol::RunParams& p = pending.params;
  sandbox::SandboxConfig box;
  const sandbox::Account& account = pending.fill ? cache_account_ : job_account_;
  auto refusal = [&] {
    reactor::SlowCall timed_policy("the job's sandbox policy", reactor::SlowCall::kTraceOnly);
    return job_sandbox_policy(config_, JobIdentity{account, pending.fill ? cache_group_name_ : job_group_name_, init_path_},
                              job.caller(), workspace_dir, p, box);
  }();
  if (refusal) return refuse_queued(job, refusal->reason, refusal->detail);
  if (pending.fill) fill_sandbox(*pending.fill, box);
  const auto& host = pending.host_workspace;
  if (auto s = host ? use_host_tmp(box, config_.bb_build_directory, *host) : Status{}; !s) {
    return refuse_queued(job, RefusalReason::kWorkspaceSetupFailed, s.error().message);
  }
  if (p.network == protocol::Network::kOutbound) {
    if (outbound_->full()) return refuse_queued(job, RefusalReason::kRunnerFull, "every outbound network address is in use");
    auto network = outbound_->claim(job.id());
    if (!network) return refuse_queued(job, RefusalReason::kWorkspaceSetupFailed, network.error().message);
    box.network = std::move(*network);
  }
  reactor::SlowCall timed_launch("launching the job", reactor::SlowCall::kTraceOnly);
  JobLaunch launch;
  launch.command.executable = sandbox::kSandboxInitPath;
  launch.command.argv = linux_init_argv(p, box);
  launch.command.env =
      host ? hermetic_env(p.env) : config::job_env(kWorkspaceInJob, account.name, pending.forwarded_env);
  launch.command.cwd =
      pending.rel_cwd.empty() ? std::string(kWorkspaceInJob) : std::string(kWorkspaceInJob) + "/" + pending.rel_cwd;
  launch.command.account = &account;
  launch.summary = job.summary();
  launch.timeout_s = pending.timeout_s;
  launch.memory_bytes = pending.memory_bytes;
  launch.pids_max = config_.pids_max;
  launch.cpus = cpu_claims_.claim(pending.cpus);
  launch.network = p.network;
  launch.platform = p.platform;
  const std::string job_id = job.id();
  // Direct, also under job_backend = systemd: an outbound job (it needs the egress namespace's fd
  // in its sandbox, which a unit cannot be given) and one with an idmapped cache (the unit's
  // entry, holding no capability, cannot make one: sandbox/user_namespace.hpp).
  if (systemd_units_ && !box.network && !pending.fill && !sandbox::first_idmapped_bind(box)) {
    return start_unit_job(job, launch, box);
  }
  // A sandbox built ahead, if one waits that becomes this job's by its workspace alone.
  auto pooled = sandbox_pool_ ? sandbox_pool_->take(box, launch.command) : nullptr;
  if (auto s = job.start(launch, *cgroups_, box, job_starter_, std::move(pooled)); !s) {
    log_error("job {}: could not start: {}", job.id(), s.error().message);
    // Job::start recorded the claim first thing: job_finished frees it, exactly once.
    return refuse_queued(job, RefusalReason::kWorkspaceSetupFailed, s.error().message);
  }
  // A starter without its helper answers at once, and a refusal has ended the job already.
  if (Job* started = jobs_.find(job_id)) started->mark_start_step(StartSteps::kSpawnAsked);
  if (Job* started = jobs_.find(job_id); started && started->state() == Job::State::kRunning) {
    metrics_.observe_queue_wait(static_cast<double>(started->queue_wait_ms()) / 1000.0);
  }
}

void Runner::configure_sandbox_pool() {
  if (shutting_down_) return;
  if (systemd_units_ || config_.sandbox_pool_size == 0) {  // a unit builds its own sandbox
    if (sandbox_pool_) sandbox_pool_->clear();
    return;
  }
  SandboxPool::Settings settings;
  settings.size = static_cast<size_t>(config_.sandbox_pool_size);
  // A default job's sandbox with only a mount point for its workspace: a job's is mounted in later.
  if (auto refusal = job_sandbox_policy(config_, JobIdentity{job_account_, job_group_name_, init_path_}, "", "",
                                        protocol::RunParams{}, settings.box)) {
    log_warning("no sandboxes built ahead: {}", refusal->detail);
    return;
  }
  settings.box.workspace_later = true;
  settings.spec.executable = sandbox::kSandboxInitPath;
  settings.spec.argv = sandbox::awaiting_init_argv();
  settings.spec.cwd = kWorkspaceInJob;
  settings.spec.uid = job_account_.uid;
  settings.spec.gid = job_account_.gid;
  if (!sandbox_pool_) sandbox_pool_ = std::make_unique<SandboxPool>(loop_, *cgroups_, job_starter_);
  if (auto s = sandbox_pool_->configure(std::move(settings)); !s) {
    log_warning("no sandboxes built ahead: {}", s.error().message);
  }
}

// A windows job: its command runs in a fresh VM (vm::VmJob), with the same admission, records,
// deadline and cancel as a Linux job. Returns false if it could not even begin.
bool Runner::start_vm_job(Job& job, const PendingStart& pending, const std::string& workspace_dir) {
  const protocol::RunParams& p = pending.params;
  JobLaunch launch;
  launch.summary = job.summary();
  launch.timeout_s = pending.timeout_s;
  launch.memory_bytes = pending.memory_bytes + vm_host_->memory_overhead();
  launch.cpus = cpu_claims_.claim(pending.cpus);
  launch.network = p.network;
  launch.platform = p.platform;
  std::vector<std::string> env;
  for (const auto& [name, value] : pending.forwarded_env) env.push_back(name + "=" + value);
  // The dependency preparation gets the outbound jobs' network when the runner has it (the VM
  // itself never has any); the claim is released with the job's (job_finished).
  std::optional<sandbox::JobNetworkPlan> prep_network;
  if (vm_host_->prepares() && outbound_) {
    auto network = outbound_->claim(job.id());
    if (!network) {
      log_error("job {}: no network for its dependency preparation: {}", job.id(), network.error().message);
      cpu_claims_.release(launch.cpus);
      return false;
    }
    prep_network = std::move(*network);
  }
  auto spec = vm_host_->job_spec(job.id(), job.caller(), p.workspace_key, workspace_dir, job_command(p), env, launch.cpus,
                                 pending.memory_bytes, job_account_, std::move(prep_network));
  spec.cwd = pending.rel_cwd;  // validated as a Linux job's; it exists in the workspace (checked above)
  spec.starter = &job_starter_;  // its preparation and disk tools start like a Linux job
  if (auto tree = workspaces_->prepared(job.caller(), p.workspace_key)) {
    launch.tree_hash = tree->tree;
    launch.bundle_bytes = tree->bundle_bytes;
  }
  if (auto s = job.start_vm(launch, std::move(spec), *cgroups_); !s) {
    log_error("job {}: could not start its VM: {}", job.id(), s.error().message);
    // Job::start_vm recorded the claim first thing: job_finished frees it, exactly once.
    return false;
  }
  metrics_.observe_queue_wait(static_cast<double>(job.queue_wait_ms()) / 1000.0);
  return true;
}

}  // namespace motor::runner
