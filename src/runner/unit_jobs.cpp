// job_backend = systemd (docs/job-isolation.md "The systemd backend"): the runner's side of it.
// At start the backend is chosen and, on the loop's bus connection, the units an earlier runner
// of this instance left are stopped (systemd_units.hpp) before recovery records their jobs as
// outcome_unknown and the runner listens; each Linux job that needs no outbound network then
// runs as a SystemdExecution.
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "base/log.hpp"
#include "runner/job.hpp"
#include "reactor/run_soon.hpp"
#include "runner/job_systemd.hpp"
#include "runner/runner.hpp"

namespace motor::runner {
namespace {

Error backend_unanswered(const Error& why) {
  return make_error("config", "job_backend = systemd, but systemd's bus does not answer: " + why.message);
}

}  // namespace

Status Runner::start_systemd_backend() {
  const config::JobBackend wanted = config_.job_backend;
  if (wanted == config::JobBackend::kDirect) return start_rest();
  if (wanted == config::JobBackend::kAuto && sd_booted() <= 0) {
    log_info("job_backend = auto: systemd is not PID 1 here; Linux jobs run in the runner's own cgroups");
    return start_rest();
  }
  // The entry program lives beside motor-init (both beside motor-runner unless init_path says).
  const std::string entry = init_path_.substr(0, init_path_.rfind('/') + 1) + "motor-unit-entry";
  auto units = SystemdUnits::open(loop_, entry, runner_instance(config_.state_dir));
  if (!units && units.error().code == "config") return units.error();  // no motor-unit-entry
  if (!units) {
    if (wanted == config::JobBackend::kSystemd) return backend_unanswered(units.error());
    log_warning("job_backend = auto: no connection to systemd's bus ({}); Linux jobs run in the runner's own cgroups",
                units.error().message);
    return start_rest();
  }
  systemd_units_ = std::move(*units);
  systemd_units_->start([this](Expected<std::vector<std::string>> left) { systemd_backend_started(std::move(left)); });
  return {};
}

void Runner::systemd_backend_started(Expected<std::vector<std::string>> leftovers) {
  if (!leftovers) {
    if (config_.job_backend == config::JobBackend::kSystemd) return abandon_start(backend_unanswered(leftovers.error()));
    log_warning("job_backend = auto: systemd's bus does not answer ({}); Linux jobs run in the runner's own cgroups",
                leftovers.error().message);
    // Not from within its own callback (this one): the connection goes on the loop's next turn.
    std::shared_ptr<SystemdUnits> unused(std::move(systemd_units_));
    if (auto s = reactor::run_soon(loop_, [unused] {}); !s) log_warning("{}", s.error().message);
  } else if (!leftovers->empty()) {
    log_warning("stopped {} job unit(s) an earlier runner left", leftovers->size());
  }
  if (auto s = start_rest(); !s) abandon_start(s.error());
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
  cgroup_name_.clear();  // systemd's: a restart finds the unit by its name (SystemdUnits::start)
  if (auto s = begin_running(launch); !s) return s;
  UnitLaunch unit{id_, summary_, caller_, launch.command, launch.memory_bytes, launch.pids_max, launch.cpus};
  ExecutionSink& sink = *this;
  auto created = std::make_unique<SystemdExecution>(host_.loop(), units, std::move(unit), sink);
  SystemdExecution& execution = *created;
  execution_ = std::move(created);
  if (on_record_) execution.command_may_run();  // it waited in the queue past its save
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
