#include "runner/job_linux.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "reactor/pool_work.hpp"
#include "reactor/slow_call.hpp"
#include "base/log.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "sandbox/cgroup_usage.hpp"
#include "sandbox/pipestatus.hpp"
#include "reactor/iteration_budget.hpp"

namespace motor::runner {
namespace {

// How often a cgroup that is being killed is checked for emptiness.
constexpr uint64_t kEmptyPollMs = 5;
// After an OOM notification without a kill yet: how often, and how many times, the kill
// counter is read again.
constexpr uint64_t kOomRecheckMs = 10;
constexpr int kOomRechecks = 50;
// Polls of a cgroup whose state cannot be read (every kEmptyPollMs) before the job ends anyway,
// its cgroup left to the background removal: about 2 s.
constexpr int kUnreadableCgroupPolls = 400;

}  // namespace

LinuxExecution::LinuxExecution(uv_loop_t* loop, LinuxLaunch launch, ExecutionSink& sink)
    : loop_(loop),
      launch_(std::move(launch)),
      sink_(sink),
      output_(loop, sink, launch_.job_id, [this] { maybe_end(); },
              [this] {
                // Output can only come after exec, so the status pipe is at EOF already.
                if (child_) child_->check_setup();
                on_execd();
              }) {}

LinuxExecution::~LinuxExecution() {
  take_cgroup_left_by_starter();  // gone before the starter answered (the runner stopping)
}

void LinuxExecution::take_cgroup_left_by_starter() {
  // What a starter that failed or was stopped may have made (and the job in it) is ours to drop.
  if (cgroup_ || !starter_makes_cgroup_) return;
  starter_makes_cgroup_ = false;
  if (auto left = cgroups_->open(launch_.cgroup_name)) cgroup_ = std::move(*left);
}

void LinuxExecution::log(const std::string& line) const { log_job(launch_.job_id, "{}", line); }

Status LinuxExecution::start(sandbox::CgroupDriver& cgroups, sandbox::Starter& starter, const sandbox::SandboxConfig& box,
                             std::unique_ptr<PooledSandbox> pooled) {
  sandbox::CgroupLimits limits;
  // Test build only (include/motor/test_switches.hpp): a weakened limit is left unset.
  limits.memory_bytes = control_weakened("memory-limit") ? 0 : launch_.memory_bytes;
  limits.pids_max = control_weakened("pids-limit") ? 0 : launch_.pids_max;
  limits.cpus = control_weakened("cpuset") ? std::string() : launch_.cpus.list();
  // The cgroup's mkdirs and limit files (0.2-0.46 ms in the hybrid layout's four hierarchies) are
  // made by the job starter in its own process just before its clone: the loop only sends the
  // request, and takes the cgroup by name when the answer comes (on_spawned). No round trip is
  // added, as one to libuv's pool would (about 0.6 ms per start: bench/README.md, session 16).
  // A sandbox built ahead is moved into the cgroup the starter makes the same way, before it
  // mounts the workspace in (adopt_sandbox).
  if (starter.makes_cgroups()) {
    cgroups_ = &cgroups;
    cgroup_request_ = sandbox::CgroupRequest{launch_.cgroup_name, limits};
    starter_makes_cgroup_ = true;
    if (pooled) return take_over(starter, std::move(pooled));
    return spawn(starter, box);
  }
  // A starter that cannot make one: here, on the loop (admission's one start per loop iteration
  // bounds it: Admission::start_next).
  auto cg = [&] {
    reactor::SlowCall timed("creating a job cgroup");
    return cgroups.create(launch_.cgroup_name, limits);
  }();
  if (!cg) return cg.error();
  cgroup_ = std::move(*cg);
  if (pooled) return take_over(starter, std::move(pooled));
  return spawn(starter, box);
}

Status LinuxExecution::take_over(sandbox::Starter& starter, std::unique_ptr<PooledSandbox> pooled) {
  child_ = std::move(pooled->child);
  out_read_ = std::move(pooled->out_read);
  err_read_ = std::move(pooled->err_read);
  pooled_gate_ = std::move(pooled->gate);
  command_message_ = std::move(pooled->command_message);
  late_binds_ = std::move(pooled->binds);
  late_binds_pending_ = true;
  sandbox::SandboxedChild::Events events;
  // A sandbox still being built when the job took it: the rest waits for the starter's answer,
  // which comes sooner than a build of the job's own would (the starter answers in order).
  events.start_failed = [this](const Error& e) {
    on_start_failed("the sandbox built ahead for the job could not be built: " + e.message);
  };
  events.spawned = [this, &starter](pid_t) { bind_pooled(starter); };
  events.exited = [this](sandbox::SandboxedExit e) {
    if (late_binds_pending_) {
      exit_before_binds_ = std::move(e);  // seen after the answer, as a spawned child's exit is
      return;
    }
    on_exit(std::move(e));
  };
  child_->rebind(std::move(events));
  if (child_->pid() > 0) bind_pooled(starter);
  return {};
}

void LinuxExecution::bind_pooled(sandbox::Starter& starter) {
  // The starter's helper moves it into the job's cgroup (from then on its limits hold and a kill
  // reaches it) and mounts the workspace in. Until it answers the gate stays shut, and open (a
  // kill closes it only then): motor-init cannot exit, so its pid names no other process.
  std::weak_ptr<char> alive = alive_;
  const sandbox::CgroupRequest* make = starter_makes_cgroup_ ? &cgroup_request_ : nullptr;
  starter.adopt_sandbox(child_->pid(), child_->mount_ns(), cgroup_.get(), make, late_binds_, [this, alive](Status mounted) {
    if (!alive.expired()) on_late_binds(std::move(mounted));
  });
}

void LinuxExecution::on_late_binds(Status mounted) {
  late_binds_pending_ = false;
  auto exit = std::move(exit_before_binds_);
  exit_before_binds_.reset();
  // A cgroup the starter was to make is ours by name once it answered; after a failure it may
  // not exist, and then nothing of the job is in one: its start failed, whatever came meanwhile.
  if (!mounted) take_cgroup_left_by_starter();
  if (!mounted && ((!exit && !kill_issued_) || !cgroup_)) {
    child_.reset();  // killed (it is in the job's cgroup, which goes too), and reaped on the loop
    pooled_gate_.reset();
    return on_start_failed("making the sandbox built ahead the job's: " + mounted.error().message);
  }
  // A sandbox taken while it was being built has its build's steps; `cloned`: ready for the command.
  sandbox::SpawnTimes times = child_->spawn_times();
  times.cloned_ns = sandbox::monotonic_ns();
  sink_.execution_spawn_steps(times);
  // A kill that came first has shut the gate: the command never runs, and its end is reported as any.
  if (mounted && !kill_issued_) gate_ = std::move(pooled_gate_);
  pooled_gate_.reset();
  on_spawned(child_->pid());
  if (!exit) on_execd();  // motor-init waits at its gate: the job has started
  if (gate_ && may_run_) command_may_run();
  if (exit) on_exit(std::move(*exit));
}

Status LinuxExecution::spawn(sandbox::Starter& starter, const sandbox::SandboxConfig& box) {
  // From here on a failure removes the cgroup again (its destructor); one the starter was to make
  // is not made yet.
  auto fail = [&](Error e) -> Status {
    cgroup_.reset();
    starter_makes_cgroup_ = false;
    return e;
  };
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  // motor-init's gate (--gate): the sandbox is built now, its command runs once the job is on
  // record (command_may_run), which is usually before the sandbox is ready.
  int gate_pipe[2];
  if (pipe2(gate_pipe, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd gate_read(gate_pipe[0]);
  gate_ = UniqueFd(gate_pipe[1]);
  if (may_run_) command_may_run();

  sandbox::SpawnSpec spec = launch_.command.spawn_spec();
  spec.argv.insert(spec.argv.begin() + 1, "--gate");
  spec.stdin_fd = gate_read.get();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = err_write.get();
  spec.cgroup = cgroup_.get();
  if (starter_makes_cgroup_) spec.make_cgroup = &cgroup_request_;
  out_read_ = std::move(out_read);
  err_read_ = std::move(err_read);
  sandbox::SandboxedChild::Events events;
  events.start_failed = [this](const Error& e) { on_start_failed(e.message); };
  events.spawned = [this](pid_t pid) { on_spawned(pid); };
  events.execd = [this] { on_execd(); };
  events.exited = [this](sandbox::SandboxedExit e) { on_exit(std::move(e)); };
  {
    reactor::SlowCall timed("spawning a job");
    child_ = sandbox::SandboxedChild::start(loop_, starter, box, spec, {}, std::move(events));
  }  // our ends of the job's pipes close here: the starter (or the child) holds its own
  return {};
}

void LinuxExecution::command_may_run() {
  may_run_ = true;
  if (!gate_) return;  // the spawn opens it
  // One byte into an empty pipe: never blocks. Then EOF, so motor-init never waits on it again.
  // A sandbox built ahead gets the whole command, which its pool made sure fits the empty pipe.
  static const char kGo = 'g';
  const std::string_view message = command_message_.empty() ? std::string_view(&kGo, 1) : command_message_;
  if (::write(gate_.get(), message.data(), message.size()) != static_cast<ssize_t>(message.size())) {
    log("could not open the gate of motor-init: " + sys_error("write").message);
  }
  gate_.reset();
  command_message_.clear();
}

void LinuxExecution::on_start_failed(const std::string& why) {
  out_read_.reset();
  err_read_.reset();
  log_error("job {}: could not start: {}", launch_.job_id, why);
  // A starter that failed after making the cgroup removes it; one that died may have left it.
  take_cgroup_left_by_starter();
  cgroup_.reset();  // killed and removed: a starter that died after its clone3 may have left the job
  sink_.execution_start_failed(why);  // may destroy this
}

void LinuxExecution::on_spawned(pid_t pid) {
  pid_ = pid;
  if (!cgroup_ && starter_makes_cgroup_) {  // the starter made it and the job is in it: ours now
    starter_makes_cgroup_ = false;
    auto made = [&] {
      reactor::SlowCall timed("opening the job's cgroup", reactor::SlowCall::kTraceOnly);
      return cgroups_->known(launch_.cgroup_name);  // the starter spawned into it: it exists
    }();
    if (!made) {
      log_error("job {}: the cgroup the starter made cannot be opened: {}", launch_.job_id, made.error().message);
      out_read_.reset();
      err_read_.reset();
      child_.reset();  // killed, and reaped on the loop; the cgroup, which we cannot reach, stays for recovery
      return sink_.execution_start_failed("the job's cgroup cannot be opened: " + made.error().message);  // may destroy this
    }
    cgroup_ = std::move(*made);
  }
  if (auto s = [&] {
        reactor::SlowCall timed_output("watching the job's output", reactor::SlowCall::kTraceOnly);
        return output_.start(std::move(out_read_), std::move(err_read_));
      }();
      !s) {
    // Unwatched, the job could not be followed: it is killed and refused.
    log_error("job {}: could not watch it: {}", launch_.job_id, s.error().message);
    output_.abandon();
    child_.reset();  // killed, and reaped on the loop
    cgroup_.reset();  // what else is in it is killed, and the cgroup removed (or reaped)
    return sink_.execution_start_failed(s.error().message);  // may destroy this
  }
  watch_oom();
  log_entry(LogLevel::kInfo, {{"MOTOR_JOB_ID", launch_.job_id}, {"MOTOR_CALLER", launch_.caller}},
            fmt::format("started for caller {}, pid {} in cgroup {} on cpus {} as {}: {}", launch_.caller, pid_,
                  launch_.cgroup_name, launch_.cpus.list(),
                  launch_.command.account->name, launch_.summary));
  // Cancelled or past its deadline while the starter worked: kill what now exists.
  if (kill_issued_) kill(std::nullopt);
}

void LinuxExecution::on_execd() {
  if (started_confirmed_) return;
  started_confirmed_ = true;
  if (child_) sink_.execution_spawn_steps(child_->spawn_times());
  sink_.execution_started();
}

void LinuxExecution::shutdown() { output_.shutdown(); }

void LinuxExecution::on_exit(sandbox::SandboxedExit exit) {
  if (exited_) return;
  reactor::SlowCall timed("a job's main process exited", reactor::SlowCall::kTraceOnly);
  exited_ = true;
  wait_status_ = exit.wait_status;
  if (exit.init_pipestatus && WIFEXITED(wait_status_) &&
      sandbox::pipestatus_reportable(*exit.init_pipestatus, WEXITSTATUS(wait_status_))) {
    pipestatus_ = std::move(exit.init_pipestatus);
  }
  setup_error_ = std::move(exit.setup_failure);
  const bool exec_failed = setup_error_.rfind("exec:", 0) == 0;
  if (!setup_error_.empty() && !exec_failed) {
    log("the sandbox could not be set up: " + setup_error_);  // refused before start: no `started` record
  } else {
    on_execd();  // a command killed before it was seen to exec is reported as started, as it always was
    // As a shell reports a command it cannot run: a message on stderr and exit status 127.
    if (exec_failed) output_.append_own(JobLog::Kind::kStderr, "motor: cannot run the command: " + setup_error_.substr(6) + "\n");
  }
  sink_.execution_exited();
  check_empty();
}

void LinuxExecution::watch_oom() {
  reactor::SlowCall timed("watching the job's OOM kills", reactor::SlowCall::kTraceOnly);
  auto watch = cgroup_->watch_oom();
  if (!watch) {
    log("no live OOM watcher (" + watch.error().message + "); an OOM kill is found at exit only");
    return;
  }
  oom_watch_.emplace(std::move(*watch));
  int rc = oom_poll_.init(this, uv_poll_init, loop_, oom_watch_->fd());
  if (rc == 0) {
    rc = uv_poll_start(oom_poll_.get(), UV_READABLE, [](uv_poll_t* h, int, int) {
      if (auto* self = reactor::owner_of<LinuxExecution>(h)) self->on_oom_event(true);
    });
  }
  if (auto s = reactor::uv_status(rc, "watching for OOM kills"); !s) {
    log(s.error().message + "; an OOM kill is found at exit only");
    oom_poll_.close();
  }
}

void LinuxExecution::on_oom_event(bool woken) {
  auto kills = oom_watch_->consume();
  if (!kills) {
    log("the OOM watcher failed (" + kills.error().message + "); an OOM kill is found at exit only");
    oom_poll_.close();
    return;
  }
  if (*kills <= oom_kills_seen_) {
    // v1 signals as the cgroup enters OOM, before the killer has picked a victim (or reclaim
    // may still succeed): look at the counter again for a short while.
    if (woken && oom_rechecks_left_ == 0) {
      oom_rechecks_left_ = kOomRechecks;
      int rc = oom_recheck_.live() ? 0 : oom_recheck_.init(this, uv_timer_init, loop_);
      if (rc == 0) {
        rc = uv_timer_start(oom_recheck_.get(), [](uv_timer_t* h) {
          auto* self = reactor::owner_of<LinuxExecution>(h);
          if (!self || !self->oom_poll_.live()) return;
          if (--self->oom_rechecks_left_ <= 0) uv_timer_stop(h);
          self->on_oom_event(false);
        }, kOomRecheckMs, kOomRecheckMs);
      }
      if (rc != 0) oom_rechecks_left_ = 0;  // the exit-time read still confirms
    }
    return;
  }
  oom_rechecks_left_ = 0;
  if (oom_recheck_.live()) uv_timer_stop(oom_recheck_.get());
  oom_kills_seen_ = *kills;
  log(fmt::format("OOM kill seen by the watcher: the job hit its memory limit of {} bytes ({} kill(s) so far)",
                  launch_.memory_bytes, *kills));
}

void LinuxExecution::kill(std::optional<protocol::KillReason> why) {
  // A command still at its gate never runs: motor-init sees EOF there and exits. A sandbox built
  // ahead keeps its gate until the starter has answered (on_late_binds closes it then).
  if (!may_run_) gate_.reset();
  if (!late_binds_pending_) pooled_gate_.reset();
  if (!ended_ && !cgroup_ && starter_makes_cgroup_) {
    // The starter is making the cgroup: the kill happens as it answers (on_spawned), and a
    // command still at its gate never runs (closed above).
    if (why && !killed_) killed_ = why;
    kill_issued_ = true;
    return;
  }
  if (ended_ || !cgroup_) return;
  if (why && !killed_ && !(exited_ && cgroup_empty_)) killed_ = why;
  kill_issued_ = true;
  if (control_weakened("cgroup-kill")) {  // test build only: the main process alone is killed
    if (child_ && !exited_) child_->kill();
  } else {
    kill_cgroup();
  }
  if (exited_) check_empty();
}

// The cgroup.kill write returns only once the kernel has signalled every task (2-42 ms for 1,000
// on a loaded host; pure v1 freezes, kills and thaws for up to 2 s), so it runs on libuv's pool.
// The emptiness poll sees the result; a failure signals the main process, as before. The job
// ends only after the answer (maybe_end), so the cgroup outlives the write.
void LinuxExecution::kill_cgroup() {
  if (kill_in_flight_) return;  // that kill takes whatever the job has forked since
  kill_in_flight_ = true;
  auto cgroup = cgroup_;
  auto result = std::make_shared<Status>();
  std::weak_ptr<char> alive = alive_;
  auto queued = reactor::run_on_pool(
      loop_, [cgroup, result] { *result = cgroup->kill_all(); },
      [this, cgroup, result, alive]() mutable {
        if (alive.expired()) {
          // Only a runner torn down with the job still running gets here; its reaper may be gone
          // too, so what is left stays for the next start's recovery.
          (void)cgroup->disown();
          return;
        }
        kill_in_flight_ = false;
        if (!*result) kill_failed(result->error().message);
        maybe_end();
      });
  if (queued) return;
  kill_in_flight_ = false;
  log(queued.error().message + "; killing the cgroup on the loop");
  if (auto s = cgroup_->kill_all(); !s) kill_failed(s.error().message);
}

void LinuxExecution::kill_failed(const std::string& why) {
  log("killing the cgroup failed: " + why + "; signalling the main process");
  if (child_ && !exited_) child_->kill();
}

void LinuxExecution::check_empty() {
  if (cgroup_empty_) return;
  auto populated = cgroup_->populated();
  if (!populated) {
    const auto dirs = cgroup_->directories();
    if (std::none_of(dirs.begin(), dirs.end(), [](const std::string& d) { return access(d.c_str(), F_OK) == 0; })) {
      // Removed under us (only an empty cgroup can be): nothing of the job is left in it.
      log("the job's cgroup is gone (something else removed it); its processes are gone with it");
      populated = false;
    } else if (++unreadable_polls_ >= kUnreadableCgroupPolls) {
      log(fmt::format("cannot read the cgroup's state for {} ms ({}); the job ends, its cgroup is removed in the background",
                      kUnreadableCgroupPolls * kEmptyPollMs, populated.error().message));
      populated = false;  // release() hands the cgroup to the reaper
    } else if (unreadable_polls_ == 1) {
      log(fmt::format("cannot read the cgroup's state: {} (retried for {} ms)", populated.error().message,
                      kUnreadableCgroupPolls * kEmptyPollMs));
    }
  }
  // Test build only ("cgroup-kill"): what the command left gets 500 ms to go, then the job ends
  // without it (and without the output pipes it may still hold).
  const bool give_up = control_weakened("cgroup-kill") && exited_ && ++leftover_polls_ > 100;
  if (give_up) output_.abandon();
  if ((populated && !*populated) || give_up) {
    cgroup_empty_ = true;
    empty_poll_.close();
    maybe_end();
    return;
  }
  // The command is gone but something it started is still running (a daemon that left the
  // session, say): nothing of a job outlives it.
  if (!kill_issued_) kill(std::nullopt);
  if (!empty_poll_.live()) {
    int rc = empty_poll_.init(this, uv_timer_init, loop_);
    if (rc == 0) {
      rc = uv_timer_start(empty_poll_.get(), [](uv_timer_t* h) {
        if (auto* self = reactor::owner_of<LinuxExecution>(h)) self->check_empty();
      }, kEmptyPollMs, kEmptyPollMs);
    }
    if (auto s = reactor::uv_status(rc, "the timer that waits for the job's cgroup to empty"); !s) {
      log(s.error().message + "; the job ends now, its cgroup is removed in the background");
      empty_poll_.close();
      cgroup_empty_ = true;  // release() hands the cgroup to the reaper
      maybe_end();
    }
  }
}

void LinuxExecution::maybe_end() {
  // Not while a kill is on the pool: the job's end releases the cgroup that kill still uses.
  if (ended_ || !exited_ || !cgroup_empty_ || kill_in_flight_ || !output_.drained()) {
    end_later_.close();  // what it waits for calls again: a put-off end does not poll for it
    return;
  }
  // The end is a step of its own (reactor::IterationBudget): past the iteration's budget (a
  // burst's exits read in one poll) it comes in a later iteration, from an idle handle.
  if (reactor::IterationBudget::defer() && end_later()) return;
  end_later_.close();
  ended_ = true;
  reactor::SlowCall timed("the end of a job's execution", reactor::SlowCall::kTraceOnly);
  empty_poll_.close();
  sink_.execution_ended(end_state());  // may destroy this
}

bool LinuxExecution::end_later() {
  if (end_later_.live()) return true;  // armed: it calls maybe_end again
  int rc = end_later_.init(this, uv_idle_init, loop_);
  if (rc == 0) {
    rc = uv_idle_start(end_later_.get(), [](uv_idle_t* h) {
      if (auto* self = reactor::owner_of<LinuxExecution>(h)) self->maybe_end();
    });
  }
  if (auto s = reactor::uv_status(rc, "the idle handle that puts a job's end off"); !s) {
    end_later_.close();
    log(s.error().message + "; the job ends now");  // without it the end is not put off
    return false;
  }
  return true;
}

ExecutionEnd LinuxExecution::end_state() {
  ExecutionEnd end;
  // The watcher saw it live (a wake-up still queued in this loop iteration counts too); the
  // counter read now confirms, and covers a watcher that could not be set up.
  if (oom_watch_ && oom_poll_.live()) {
    pollfd ready{oom_watch_->fd(), POLLIN, 0};
    if (::poll(&ready, 1, 0) > 0 || oom_rechecks_left_ > 0) on_oom_event(false);
  }
  end.oom_killed = oom_kills_seen_ > 0 || cgroup_->oom_killed();
  oom_poll_.close();  // before remove(): v1 signals the eventfd when the cgroup goes
  oom_recheck_.close();
  oom_watch_.reset();
  end.killed = killed_;
  end.pipestatus = pipestatus_;
  reactor::SlowCall timed_usage("reading the cgroup's usage", reactor::SlowCall::kTraceOnly);
  const sandbox::CgroupUsage usage = sandbox::read_cgroup_usage(cgroup_->directories());  // (ext) resource_usage
  end.cpu_user_us = usage.cpu_user_us;
  end.cpu_system_us = usage.cpu_system_us;
  end.memory_peak_bytes = usage.memory_peak_bytes;
  set_sandboxed_outcome(end, setup_error_, wait_status_);
  return end;
}

void LinuxExecution::release(std::function<void()> released) {
  if (!cgroup_) return released();
  // Test build only ("cgroup-kill"): nothing is killed. An empty cgroup is removed; one that
  // still holds what the command left stays with it (the gate's and the tests' clean-up remove both).
  if (control_weakened("cgroup-kill")) {
    if (!cgroup_->remove()) (void)cgroup_->disown();
    cgroup_.reset();
    return released();
  }
  // Removed on libuv's pool, as it was made: the rmdirs of a cgroup in each v1 hierarchy took
  // 7-22 ms of the loop per job in the hybrid layout (bench/loop_stall.cpp's "removing a job
  // cgroup" stalls). One still busy (a dying process on a loaded host) goes to the runner's
  // reaper, on the loop, and the terminal record does not wait for it.
  struct Removal {
    sandbox::CgroupRemains remains;
    std::string error;
    bool gone = false;
  };
  std::shared_ptr<sandbox::JobCgroup> cgroup = std::move(cgroup_);
  auto removal = std::make_shared<Removal>();
  std::weak_ptr<char> alive = alive_;
  auto queued = reactor::run_on_pool(
      loop_, [cgroup, removal] { removal->gone = cgroup->release_here(removal->remains, removal->error); },
      [cgroup, removal, alive, released]() mutable {
        // Without this execution the runner is being torn down and its reaper may be gone: what
        // is left stays for the next start's recovery.
        if (alive.expired()) return;
        if (!removal->gone) sandbox::reap_or_leave(cgroup->reaper(), std::move(removal->remains));
        cgroup.reset();  // disowned by release_here: its destructor leaves it
        released();      // may destroy this
      });
  if (queued) return;
  log(queued.error().message + "; removing the cgroup on the loop");
  {
    reactor::SlowCall timed("removing a job cgroup");
    cgroup.reset();
  }
  released();
}

}  // namespace motor::runner
