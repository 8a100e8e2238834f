// job_backend = systemd (docs/job-isolation.md "The systemd backend"): the runner's side of it.
// At start the backend is chosen (systemd_units.hpp), the units an earlier runner left are
// stopped before recovery records their jobs as outcome_unknown, and the loop's bus connection
// opens; each Linux job that needs no outbound network then runs as a SystemdExecution.
#include <unistd.h>

#include "base/log.hpp"
#include "runner/job.hpp"
#include "runner/job_systemd.hpp"
#include "runner/runner.hpp"

namespace motor::runner {

Status Runner::start_systemd_backend() {
  auto wanted = use_systemd_backend(config_.job_backend);
  if (!wanted) return wanted.error();
  if (!*wanted) return {};
  // The entry program lives beside motor-init (both beside motor-runner unless init_path says).
  const std::string entry = init_path_.substr(0, init_path_.rfind('/') + 1) + "motor-unit-entry";
  auto units = SystemdUnits::open(loop_, entry);
  if (!units) return units.error();
  auto left = stop_leftover_job_units();
  if (!left) return make_error("config", "job_backend = systemd: " + left.error().message);
  if (!left->empty()) log_warning("stopped {} job unit(s) an earlier runner left", left->size());
  systemd_units_ = std::move(*units);
  return {};
}

void Runner::start_unit_job(Job& job, const JobLaunch& launch, const sandbox::SandboxConfig& box) {
  const std::string job_id = job.id();
  if (auto s = job.start_unit(launch, box, *systemd_units_); !s) {
    log_error("job {}: could not start its unit: {}", job_id, s.error().message);
    // Job::start_unit recorded the claim first thing: job_finished frees it, exactly once.
    return refuse_queued(job, protocol::RefusalReason::kWorkspaceSetupFailed, s.error().message);
  }
  if (Job* started = jobs_.find(job_id)) started->mark_start_step(StartSteps::kSpawnAsked);
  if (Job* started = jobs_.find(job_id); started && started->state() == Job::State::kRunning) {
    metrics_.observe_queue_wait(static_cast<double>(started->queue_wait_ms()) / 1000.0);
  }
}

Status Job::start_unit(const JobLaunch& launch, const sandbox::SandboxConfig& box, SystemdUnits& units) {
  cgroup_name_.clear();  // systemd's: a restart finds the unit by its name (stop_leftover_job_units)
  if (auto s = begin_running(launch); !s) return s;
  UnitLaunch unit{id_, summary_, caller_, launch.command, launch.memory_bytes, launch.pids_max, launch.cpus};
  ExecutionSink& sink = *this;
  auto created = std::make_unique<SystemdExecution>(host_.loop(), units, std::move(unit), sink);
  SystemdExecution& execution = *created;
  execution_ = std::move(created);
  // The deadline runs from now, as for a direct job: a unit stuck before exec is killed too.
  deadline_at_start_ = true;
  arm_deadline();
  if (auto s = execution.start(box); !s) {
    execution_.reset();
    deadline_.close();
    state_ = State::kQueued;  // never ran: the runner ends it as refused
    return s;
  }
  return {};
}

}  // namespace motor::runner
