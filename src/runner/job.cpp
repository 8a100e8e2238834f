#include "runner/job.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "reactor/slow_call.hpp"
#include "runner/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"

namespace motor::runner {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How often a cgroup that is being killed is checked for emptiness.
constexpr uint64_t kEmptyPollMs = 5;
// After an OOM notification without a kill yet: how often, and how many times, the kill
// counter is read again.
constexpr uint64_t kOomRecheckMs = 10;
constexpr int kOomRechecks = 50;
// How often output held back by a full disk is offered to the log again.
constexpr uint64_t kLogRetryMs = 1000;
// Polls of a cgroup whose state cannot be read (every kEmptyPollMs) before the job ends anyway,
// its cgroup left to the background removal: about 2 s.
constexpr int kUnreadableCgroupPolls = 400;

}  // namespace

Job::Job(Runner& runner, std::string id, std::string caller, std::string workspace_key)
    : runner_(runner), id_(std::move(id)), caller_(std::move(caller)), workspace_key_(std::move(workspace_key)) {
  created_at_ms_ = now_ms();
  queued_hr_ns_ = uv_hrtime();
}

Status Job::enqueue(std::string summary) {
  summary_ = std::move(summary);
  auto log = JobLog::create(runner_.job_dir(id_), runner_.config().job_log_max_bytes);
  if (!log) return log.error();
  log_.emplace(std::move(*log));
  state_ = State::kQueued;
  return {};
}

void Job::finish_unstarted(protocol::Outcome outcome, std::optional<std::string> detail, std::optional<int64_t> retry_after_ms) {
  if (state_ != State::kQueued) return;
  protocol::TerminalRecord t;
  t.job_id = id_;
  t.outcome = std::move(outcome);
  t.ran = "none";
  t.refusal_detail = std::move(detail);
  t.retry_after_ms = retry_after_ms;
  t.queue_wait_ms = static_cast<int64_t>((uv_hrtime() - queued_hr_ns_) / 1000000);
  t.network = network_;
  t.platform = platform_;
  t.seq = log_ ? log_->last_seq() + 1 : 1;
  terminal_json_ = protocol::encode_terminal(t);
  conclude("ended before it started", t.outcome);
}

void Job::conclude(const char* how, const protocol::Outcome& outcome) {
  state_ = State::kFinished;
  finished_at_ms_ = now_ms();
  if (log_) append_terminal();
  const std::string detail = outcome.kind == protocol::Outcome::Kind::kExit     ? std::to_string(outcome.code)
                             : outcome.kind == protocol::Outcome::Kind::kSignal ? std::to_string(outcome.signal)
                                                                                : outcome.reason;
  log_entry(LogLevel::kInfo,
            {{"MOTOR_JOB_ID", id_}, {"MOTOR_CALLER", caller_}, {"MOTOR_OUTCOME", protocol::outcome_type(outcome.kind)},
             {"MOTOR_OUTCOME_DETAIL", detail}},
            fmt::format("{}: {}", how, terminal_json_));
  pump_all();
  maybe_close_log();
  runner_.job_finished(*this);
}

// A job is only destroyed once finished and unfollowed, or at exit: then the runner's sessions
// may be gone already, and a session's list of followed job ids needs no cleaning (an id that
// names no job is skipped).
Job::~Job() = default;

std::unique_ptr<Job> Job::restore(Runner& runner, std::string id, std::string caller, std::string workspace_key,
                                  std::string summary, int64_t created_at_ms, std::string terminal_json) {
  auto job = std::make_unique<Job>(runner, std::move(id), std::move(caller), std::move(workspace_key));
  job->summary_ = std::move(summary);
  job->created_at_ms_ = created_at_ms;
  job->terminal_json_ = std::move(terminal_json);
  job->state_ = State::kFinished;
  job->finished_at_ms_ = created_at_ms;  // a restored job's end is not recorded: its creation bounds it
  return job;
}

Status Job::start(const JobLaunch& launch, sandbox::CgroupDriver& cgroups, const sandbox::SandboxConfig& box) {
  summary_ = launch.summary;
  memory_bytes_ = launch.memory_bytes;
  network_ = launch.network;
  platform_ = launch.platform;
  cgroup_name_ = "job-" + id_;
  sandbox::CgroupLimits limits;
  // Test build only (include/motor/test_switches.hpp): a weakened limit is left unset.
  limits.memory_bytes = control_weakened("memory-limit") ? 0 : launch.memory_bytes;
  limits.pids_max = control_weakened("pids-limit") ? 0 : launch.pids_max;
  limits.cpus = control_weakened("cpuset") ? std::string() : launch.cpus.list();
  cpus_ = launch.cpus;
  auto cg = [&] {
    reactor::SlowCall timed("creating a job cgroup");
    return cgroups.create(cgroup_name_, limits);
  }();
  if (!cg) return cg.error();
  cgroup_ = std::move(*cg);
  // From here on a failure must remove the cgroup again.
  auto fail = [&](Error e) -> Status {
    if (cgroup_) (void)cgroup_->remove();
    cgroup_.reset();
    state_ = State::kQueued;  // never ran: the runner ends it as refused
    return e;
  };

  if (!log_) {
    auto log = JobLog::create(runner_.job_dir(id_), runner_.config().job_log_max_bytes);
    if (!log) return fail(log.error());
    log_.emplace(std::move(*log));
  }
  state_ = State::kRunning;

  // state.json records the job in this loop iteration, before its `accepted` goes out; if the
  // runner dies first, the restart finds the cgroup unnamed by any record and kills it.
  runner_.request_save();

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) return fail(sys_error("opening /dev/null"));

  sandbox::SpawnSpec spec;
  spec.executable = launch.executable;
  spec.argv = launch.argv;
  spec.env = launch.env;
  spec.cwd = launch.cwd;
  spec.uid = runner_.job_account().uid;
  spec.gid = runner_.job_account().gid;
  spec.stdin_fd = dev_null.get();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = err_write.get();
  spec.cgroup = cgroup_.get();
  started_hr_ns_ = uv_hrtime();
  queue_wait_ms_ = static_cast<int64_t>((started_hr_ns_ - queued_hr_ns_) / 1000000);
  out_read_ = std::move(out_read);
  err_read_ = std::move(err_read);
  // The deadline runs from now: a child stuck before exec is killed with its cgroup like any job.
  uv_loop_t* loop = runner_.loop();
  uv_timer_init(loop, deadline_.get());
  deadline_.initialized(this);
  uv_timer_start(deadline_.get(), [](uv_timer_t* h) {
    if (auto* job = reactor::owner_of<Job>(h)) job->on_timeout();
  }, static_cast<uint64_t>(launch.timeout_s) * 1000, 0);
  {
    reactor::SlowCall timed("spawning a job");
    runner_.job_starter().spawn(box, spec, [this](Expected<sandbox::SpawnedProcess> spawned) {
      on_spawned(std::move(spawned));
    });
  }  // our ends of the job's pipes close here: the starter (or the child) holds its own
  return {};
}

void Job::on_spawned(Expected<sandbox::SpawnedProcess> spawned) {
  if (!spawned) {
    (void)cgroup_->kill_all();  // a starter that died after its clone3 may have left the job
    deadline_.close();
    out_read_.reset();
    err_read_.reset();
    log_error("job {}: could not start: {}", id_, spawned.error().message);
    if (auto s = cgroup_->remove(); !s) {
      log_job(id_, "removing the cgroup: {}", s.error().message);
      runner_.retire_cgroup(cgroup_->directories(), "job " + id_);
    }
    cgroup_.reset();
    state_ = State::kQueued;  // never ran: the runner ends it as refused
    runner_.job_start_failed(*this, spawned.error().message);
    return;
  }
  pid_ = spawned->pid;
  pidfd_ = std::move(spawned->pidfd);
  setup_status_ = std::move(spawned->setup_status);
  fcntl(setup_status_.get(), F_SETFL, O_NONBLOCK);

  uv_loop_t* loop = runner_.loop();
  stdout_ = std::make_unique<OutputPipe>();
  stderr_ = std::make_unique<OutputPipe>();
  stdout_->kind = JobLog::Kind::kStdout;
  stderr_->kind = JobLog::Kind::kStderr;
  for (auto* p : {stdout_.get(), stderr_.get()}) {
    p->job = this;
    uv_pipe_init(loop, p->pipe.get(), 0);
    p->pipe.initialized(p);
    uv_pipe_open(p->pipe.get(), (p == stdout_.get() ? out_read_ : err_read_).release());
    start_reading(*p);
  }

  uv_poll_init(loop, pidfd_poll_.get(), pidfd_.get());
  pidfd_poll_.initialized(this);
  uv_poll_start(pidfd_poll_.get(), UV_READABLE, [](uv_poll_t* h, int, int) {
    if (auto* job = reactor::owner_of<Job>(h)) job->on_exit();
  });
  uv_poll_init(loop, setup_poll_.get(), setup_status_.get());
  setup_poll_.initialized(this);
  uv_poll_start(setup_poll_.get(), UV_READABLE | UV_DISCONNECT, [](uv_poll_t* h, int, int) {
    if (auto* job = reactor::owner_of<Job>(h)) job->confirm_started();
  });

  watch_oom();
  log_entry(LogLevel::kInfo, {{"MOTOR_JOB_ID", id_}, {"MOTOR_CALLER", caller_}},
            fmt::format("started pid {} in cgroup {} on cpus {} as {}: {}", pid_, cgroup_name_, cpus_.list(),
                        runner_.job_account().name, summary_));
  // Cancelled or past its deadline while the starter worked: kill what now exists.
  if (kill_issued_) kill_tree(nullptr);
}

void Job::start_reading(OutputPipe& out) {
  uv_read_start(
      out.pipe.stream(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* op = static_cast<OutputPipe*>(h->data);
        *buf = uv_buf_init(op->buf, sizeof op->buf);
      },
      [](uv_stream_t* h, ssize_t nread, const uv_buf_t*) {
        if (auto* op = static_cast<OutputPipe*>(h->data)) op->job->on_output(*op, nread);
      });
}

void Job::confirm_started() {
  if (started_confirmed_ || !setup_status_) return;
  char buf[512];
  const ssize_t n = ::read(setup_status_.get(), buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;  // not exec'd yet
  started_confirmed_ = true;
  setup_poll_.close();
  setup_status_.reset();
  if (n > 0) setup_error_.assign(buf, static_cast<size_t>(n));
  const bool exec_failed = setup_error_.rfind("exec:", 0) == 0;
  if (!setup_error_.empty() && !exec_failed) {
    log_job(id_, "the sandbox could not be set up: {}", setup_error_);
    return;  // refused before start: no `started` record
  }
  started_at_ms_ = now_ms();
  append_record(protocol::encode_started(log_->last_seq() + 1, queue_wait_ms_, started_at_ms_));
  runner_.job_started(static_cast<double>(uv_hrtime() - queued_hr_ns_) / 1e9);
  if (exec_failed) {
    // As a shell reports a command it cannot run: a message on stderr and exit status 127.
    (void)append_output(*stderr_, "motor: cannot run the command: " + setup_error_.substr(6) + "\n");
  }
}

void Job::on_output(OutputPipe& out, ssize_t nread) {
  if (nread > 0) {
    confirm_started();
    if (!started_confirmed_) {
      // Output can only come after exec, so the status pipe is at EOF already; be safe anyway.
      started_confirmed_ = true;
      started_at_ms_ = now_ms();
      append_record(protocol::encode_started(log_->last_seq() + 1, queue_wait_ms_, started_at_ms_));
    }
    append_output(out, std::string_view(out.buf, static_cast<size_t>(nread)));
    return;
  }
  if (nread == 0) return;
  out.eof = true;
  out.pipe.close();
  maybe_finish();
}

bool Job::append_output(OutputPipe& out, std::string_view bytes) {
  auto seq = log_->append(out.kind, bytes);
  if (!seq && shutting_down_) {
    log_job(id_, "{}; {} bytes of output dropped (the runner is stopping)", seq.error().message, bytes.size());
    return true;
  }
  if (!seq) {
    // A full disk: hold this chunk, stop reading this pipe (the job blocks on its writes, so
    // nothing is lost), and offer it to the log again later.
    out.pending.assign(bytes);
    if (out.pipe.live()) uv_read_stop(out.pipe.stream());
    log_job(id_, "{}; output paused until the log can be written", seq.error().message);
    if (!retry_timer_.live()) {
      uv_timer_init(runner_.loop(), retry_timer_.get());
      retry_timer_.initialized(this);
    }
    uv_timer_start(retry_timer_.get(), [](uv_timer_t* h) {
      if (auto* job = reactor::owner_of<Job>(h)) job->retry_pending_output();
    }, kLogRetryMs, 0);
    return false;
  }
  pump_all();
  return true;
}

void Job::retry_pending_output() {
  for (OutputPipe* p : {stdout_.get(), stderr_.get()}) {
    if (!p || p->pending.empty()) continue;
    std::string chunk = std::move(p->pending);
    p->pending.clear();
    if (!append_output(*p, chunk)) return;
    if (p->pipe.live() && !p->eof) start_reading(*p);
  }
  maybe_finish();
}

void Job::on_exit() {
  if (exited_) return;
  const int init_signal = sandbox::init_reported_signal(pid_);  // read before the reap frees the pid
  auto status = sandbox::reap_pidfd(pidfd_.get());
  if (!status) return;  // spurious wakeup
  exited_ = true;
  wait_status_ = *status;
  // The command died of a signal inside the sandbox: report it as that signal, not as 128+N.
  if (init_signal && WIFEXITED(wait_status_) && WEXITSTATUS(wait_status_) == 128 + init_signal) wait_status_ = init_signal;
  pidfd_poll_.close();
  pidfd_.reset();
  confirm_started();
  if (deadline_.live()) uv_timer_stop(deadline_.get());
  check_empty();
}

void Job::watch_oom() {
  auto watch = cgroup_->watch_oom();
  if (!watch) {
    log_job(id_, "no live OOM watcher ({}); an OOM kill is found at exit only", watch.error().message);
    return;
  }
  oom_watch_.emplace(std::move(*watch));
  uv_poll_init(runner_.loop(), oom_poll_.get(), oom_watch_->fd());
  oom_poll_.initialized(this);
  uv_poll_start(oom_poll_.get(), UV_READABLE, [](uv_poll_t* h, int, int) {
    if (auto* job = reactor::owner_of<Job>(h)) job->on_oom_event(true);
  });
}

void Job::on_oom_event(bool woken) {
  auto kills = oom_watch_->consume();
  if (!kills) {
    log_job(id_, "the OOM watcher failed ({}); an OOM kill is found at exit only", kills.error().message);
    oom_poll_.close();
    return;
  }
  if (*kills <= oom_kills_seen_) {
    // v1 signals as the cgroup enters OOM, before the killer has picked a victim (or reclaim
    // may still succeed): look at the counter again for a short while.
    if (woken && oom_rechecks_left_ == 0) {
      oom_rechecks_left_ = kOomRechecks;
      if (!oom_recheck_.live()) {
        uv_timer_init(runner_.loop(), oom_recheck_.get());
        oom_recheck_.initialized(this);
      }
      uv_timer_start(oom_recheck_.get(), [](uv_timer_t* h) {
        auto* job = reactor::owner_of<Job>(h);
        if (!job || !job->oom_poll_.live()) return;
        if (--job->oom_rechecks_left_ <= 0) uv_timer_stop(h);
        job->on_oom_event(false);
      }, kOomRecheckMs, kOomRecheckMs);
    }
    return;
  }
  oom_rechecks_left_ = 0;
  if (oom_recheck_.live()) uv_timer_stop(oom_recheck_.get());
  oom_kills_seen_ = *kills;
  log_job(id_, "OOM kill seen by the watcher: the job hit its memory limit of {} bytes ({} kill(s) so far)",
          memory_bytes_, *kills);
}

void Job::on_timeout() {
  log_job(id_, "deadline reached; killing the job's process tree");
  kill_tree("deadline");
}

void Job::cancel() {
  if (state_ != State::kRunning || cancelled_) return;
  cancelled_ = true;
  log_job(id_, "cancelled; killing the job's process tree");
  kill_tree("cancel");
}

void Job::kill_for_shutdown() {
  // The runner is stopping: output the log cannot take (a full disk) is dropped, so the job's
  // pipes drain and it can end.
  shutting_down_ = true;
  if (stdout_ && stderr_) retry_pending_output();
  if (state_ != State::kRunning || cancelled_) return;
  cancelled_ = true;
  log_job(id_, "the runner is shutting down; killing the job's process tree");
  kill_tree("shutdown");  // killed "shutdown": nobody cancelled it (the client exits 71, not 130)
}

void Job::kill_tree(const char* why) {
  if (state_ != State::kRunning) return;
  if (vm_) {  // a VM job: the VM is destroyed, nothing of it outlives the job
    if (why && !killed_) killed_ = why;
    vm_->kill(why ? why : "cancel");
    return;
  }
  if (why && !killed_ && !(exited_ && cgroup_empty_)) killed_ = why;
  kill_issued_ = true;
  if (control_weakened("cgroup-kill")) {  // test build only: the main process alone is killed
    if (pidfd_) syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  } else if (auto s = cgroup_->kill_all(); !s) {
    log_job(id_, "killing the cgroup failed: {}; signalling the main process", s.error().message);
    if (pidfd_) syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  }
  if (exited_) check_empty();
}

void Job::check_empty() {
  if (cgroup_empty_) return;
  auto populated = cgroup_->populated();
  if (!populated) {
    const auto dirs = cgroup_->directories();
    if (std::none_of(dirs.begin(), dirs.end(), [](const std::string& d) { return access(d.c_str(), F_OK) == 0; })) {
      // Removed under us (only an empty cgroup can be): nothing of the job is left in it.
      log_job(id_, "the job's cgroup is gone (something else removed it); its processes are gone with it");
      populated = false;
    } else if (++unreadable_polls_ >= kUnreadableCgroupPolls) {
      log_job(id_, "cannot read the cgroup's state for {} ms ({}); the job ends, its cgroup is removed in the background",
              kUnreadableCgroupPolls * kEmptyPollMs, populated.error().message);
      runner_.retire_cgroup(dirs, "job " + id_);
      populated = false;
    } else if (unreadable_polls_ == 1) {
      log_job(id_, "cannot read the cgroup's state: {} (retried for {} ms)", populated.error().message,
              kUnreadableCgroupPolls * kEmptyPollMs);
    }
  }
  // Test build only ("cgroup-kill"): what the command left gets 500 ms to go, then the job ends
  // without it (and without the output pipes it may still hold).
  const bool give_up = control_weakened("cgroup-kill") && exited_ && ++leftover_polls_ > 100;
  for (OutputPipe* p : {stdout_.get(), stderr_.get()}) {
    if (give_up && !p->eof) {
      p->eof = true;
      p->pipe.close();
    }
  }
  if ((populated && !*populated) || give_up) {
    cgroup_empty_ = true;
    empty_poll_.close();
    maybe_finish();
    return;
  }
  // The command is gone but something it started is still running (a daemon that left the
  // session, say): nothing of a job outlives it.
  if (!kill_issued_) kill_tree(nullptr);
  if (!empty_poll_.live()) {
    uv_timer_init(runner_.loop(), empty_poll_.get());
    empty_poll_.initialized(this);
    uv_timer_start(empty_poll_.get(), [](uv_timer_t* h) {
      if (auto* job = reactor::owner_of<Job>(h)) job->check_empty();
    }, kEmptyPollMs, kEmptyPollMs);
  }
}

void Job::maybe_finish() {
  if (state_ == State::kFinished) return;
  if (!exited_ || !cgroup_empty_) return;
  for (OutputPipe* p : {stdout_.get(), stderr_.get()}) {
    if (!p->eof || !p->pending.empty()) return;
  }
  // A job that ran gets its workspace scanned first (a child process); it finishes when the
  // report arrives. One that never ran (setup failed) changed nothing.
  if (!report_ready_ && setup_error_.empty()) {
    if (!report_requested_) {
      report_requested_ = true;
      runner_.scan_workspace(*this);
    }
    return;
  }
  finish();
}

void Job::set_workspace_report(std::optional<std::string> tree_hash, int64_t bundle_bytes,
                               std::optional<protocol::WorkspaceReportJson> fields) {
  tree_hash_ = std::move(tree_hash);
  bundle_bytes_ = bundle_bytes;
  workspace_report_ = std::move(fields);
  if (!workspace_report_) log_job(id_, "workspace_changes: not computed (the workspace was never prepared, or the scan failed)");
  report_ready_ = true;
  maybe_finish();
}

protocol::TerminalRecord Job::started_terminal() const {
  protocol::TerminalRecord t;
  t.job_id = id_;
  t.platform = platform_;
  t.network = network_;
  t.killed = killed_;
  t.wall_ms = static_cast<int64_t>((uv_hrtime() - started_hr_ns_) / 1000000);
  t.queue_wait_ms = queue_wait_ms_;
  t.cpus = cpus_.list();
  t.cpus_shared = cpus_.overlapping;
  return t;
}

void Job::finish() {
  protocol::TerminalRecord t = started_terminal();
  // The watcher saw it live (a wake-up still queued in this loop iteration counts too); the
  // counter read now confirms, and covers a watcher that could not be set up.
  if (oom_watch_ && oom_poll_.live()) {
    pollfd ready{oom_watch_->fd(), POLLIN, 0};
    if (::poll(&ready, 1, 0) > 0 || oom_rechecks_left_ > 0) on_oom_event(false);
  }
  t.oom_killed = oom_kills_seen_ > 0 || cgroup_->oom_killed();
  oom_poll_.close();  // before remove(): v1 signals the eventfd when the cgroup goes
  oom_recheck_.close();
  oom_watch_.reset();
  t.tree_hash = tree_hash_;
  t.bundle_bytes = bundle_bytes_;
  t.workspace = workspace_report_;
  const bool refused = !setup_error_.empty() && setup_error_.rfind("exec:", 0) != 0;
  if (refused) {
    t.outcome.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
    t.outcome.reason = "workspace_setup_failed";
    t.refusal_detail = setup_error_.substr(0, 1024);
    t.ran = "none";
    t.killed.reset();
  } else if (killed_ == std::optional<std::string>("cancel") || killed_ == std::optional<std::string>("shutdown")) {
    t.outcome.kind = protocol::Outcome::Kind::kCancelled;
    t.ran = "remote";
  } else if (WIFEXITED(wait_status_)) {
    t.outcome.kind = protocol::Outcome::Kind::kExit;
    t.outcome.code = WEXITSTATUS(wait_status_);
    t.ran = "remote";
  } else {
    t.outcome.kind = protocol::Outcome::Kind::kSignal;
    t.outcome.signal = WTERMSIG(wait_status_);
    t.ran = "remote";
  }
  // The cgroup goes before the terminal record, so a client that saw `terminal` finds nothing of
  // the job left; one still busy (a dying process on a loaded host) is removed in the background.
  if (auto s = [&] {
        reactor::SlowCall timed("removing a job cgroup");
        return cgroup_->remove();
      }();
      !s) {
    log_job(id_, "removing the cgroup: {}", s.error().message);
    runner_.retire_cgroup(cgroup_->directories(), "job " + id_);
  }
  cgroup_.reset();
  t.seq = log_->last_seq() + 1;
  terminal_json_ = protocol::encode_terminal(t);

  deadline_.close();
  empty_poll_.close();
  retry_timer_.close();
  setup_poll_.close();
  // The pipes are closed; their read buffers need not outlive the job.
  stdout_.reset();
  stderr_.reset();
  conclude("finished", t.outcome);
}

void Job::append_record(const std::string& json) {
  if (auto seq = log_->append(JobLog::Kind::kRecord, json); !seq) {
    log_job(id_, "cannot write a record to the job log: {}", seq.error().message);
    return;
  }
  pump_all();
}

void Job::append_terminal() {
  auto seq = log_->append(JobLog::Kind::kRecord, terminal_json_);
  if (seq) {
    unlogged_terminal_.clear();
    return;
  }
  if (unlogged_terminal_.empty()) {
    log_job(id_, "cannot write the terminal record to the job log ({}); followers get it from memory, and writing "
            "it is retried", seq.error().message);
  }
  // Followers get it from memory meanwhile (pump); the log gets it once there is room.
  unlogged_terminal_ = terminal_json_;
  if (!terminal_retry_.live()) {
    uv_timer_init(runner_.loop(), terminal_retry_.get());
    terminal_retry_.initialized(this);
  }
  uv_timer_start(terminal_retry_.get(), [](uv_timer_t* h) {
    auto* job = reactor::owner_of<Job>(h);
    if (!job || !job->log_) return;
    job->append_terminal();
    if (job->unlogged_terminal_.empty()) job->maybe_close_log();
  }, kLogRetryMs, 0);
}

void Job::maybe_close_log() {
  // A finished job holds no fd: its log is opened again (read-only) for a replay.
  if (state_ == State::kFinished && followers_.empty() && unlogged_terminal_.empty()) log_.reset();
}

int64_t Job::last_seq() const {
  return (log_ ? log_->last_seq() : 0) + (unlogged_terminal_.empty() ? 0 : 1);
}

void Job::expire_history() {
  if (state_ != State::kFinished || has_followers()) return;
  log_.reset();
  runner_.remove_history(id_);
}

Status Job::open_log_for_replay() {
  if (log_) return {};
  auto log = JobLog::open(runner_.job_dir(id_), runner_.config().job_log_max_bytes, state_ != State::kFinished);
  if (!log) return log.error();
  log_.emplace(std::move(*log));
  // A terminal record the log never got (a full disk, then a restart) is served from memory.
  if (state_ == State::kFinished && !terminal_json_.empty() && !log_->last_terminal()) unlogged_terminal_ = terminal_json_;
  return {};
}

void Job::follow(Session& session, int64_t request_id, int64_t from_seq) {
  if (auto s = open_log_for_replay(); !s) {
    protocol::TerminalRecord t;
    t.job_id = id_;
    t.outcome.kind = protocol::Outcome::Kind::kHistoryExpired;
    t.ran.reset();
    session.send(protocol::with_request_id(request_id, protocol::encode_terminal(t)));
    return;
  }
  Follower f{session.id(), request_id, {}, std::nullopt};
  // A finished job always ends a follow with its terminal record, even past the end.
  if (state_ == State::kFinished && from_seq > last_seq()) from_seq = last_seq();
  auto cursor = log_->cursor_at(from_seq);
  if (!cursor) {
    session.send(protocol::encode_error(request_id, "internal", cursor.error().message));
    return;
  }
  f.cursor = *cursor;
  if (from_seq < log_->first_kept_seq()) f.truncated_before_seq = log_->first_kept_seq();
  f.wants_pump = true;
  followers_.push_back(f);
  session.followed_jobs().push_back(id_);
  schedule_pump();
}

void Job::schedule_pump() {
  if (fan_out_queued_) return;
  fan_out_queued_ = true;
  runner_.schedule_fan_out(id_);
}

void Job::unfollow(Session& session) {
  std::erase_if(followers_, [&](const Follower& f) { return f.session == session.id(); });
  maybe_close_log();
}

void Job::session_drained(Session& session) {
  bool any = false;
  for (auto& f : followers_) {
    if (f.session == session.id()) any = f.wants_pump = true;
  }
  if (any) schedule_pump();
}

void Job::pump_all() {
  drop_stalled_followers();
  for (auto& f : followers_) f.wants_pump = true;
  if (!followers_.empty()) schedule_pump();
}

bool Job::pump_slice(size_t& budget) {
  fan_out_queued_ = false;
  // pump() may remove the follower it serves (after the terminal record): find each by its key.
  std::vector<std::pair<SessionId, int64_t>> keys;
  for (const auto& f : followers_) {
    if (f.wants_pump) keys.emplace_back(f.session, f.request_id);
  }
  bool more = false;
  for (const auto& [sid, request_id] : keys) {
    auto it = std::find_if(followers_.begin(), followers_.end(),
                           [&](const Follower& g) { return g.session == sid && g.request_id == request_id; });
    if (it == followers_.end()) continue;
    if (budget == 0) {
      more = true;
      break;
    }
    it->wants_pump = false;
    const bool cut_short = pump(*it, &budget);
    if (cut_short) {
      auto again = std::find_if(followers_.begin(), followers_.end(),
                                [&](const Follower& g) { return g.session == sid && g.request_id == request_id; });
      if (again != followers_.end()) again->wants_pump = more = true;
    }
  }
  if (more) fan_out_queued_ = true;  // the runner queues it again
  return more;
}

void Job::drop_stalled_followers() {
  const uint64_t now = uv_now(runner_.loop());
  const uint64_t limit = static_cast<uint64_t>(runner_.config().stalled_client_timeout_s) * 1000;
  std::vector<std::pair<SessionId, int64_t>> dropped;
  for (const auto& f : followers_) {
    if (f.stalled_since_ms != 0 && now - f.stalled_since_ms >= limit) dropped.emplace_back(f.session, f.request_id);
  }
  for (auto [sid, request_id] : dropped) {
    auto it = std::find_if(followers_.begin(), followers_.end(),
                           [&](const Follower& g) { return g.session == sid && g.request_id == request_id; });
    const int64_t resume = it->cursor.next_seq;
    followers_.erase(it);
    Session* session = runner_.find_session(sid);
    if (!session) continue;
    std::erase(session->followed_jobs(), id_);
    log_job(id_, "dropped a client that read nothing for {} s (it may reattach from seq {})",
            runner_.config().stalled_client_timeout_s, resume);
    // Queued behind what it has not read yet: it sees this once it reads again.
    session->send(protocol::encode_error(
        request_id, "stalled",
        fmt::format("this client read nothing for {} s while job {} had more output; reattach with exec.attach "
                    "from_seq {} (nothing is lost)",
                    runner_.config().stalled_client_timeout_s, id_, resume)));
  }
  if (!dropped.empty()) maybe_close_log();
}

bool Job::pump(Follower& f, size_t* budget) {
  Session* found = runner_.find_session(f.session);
  const int64_t request_id = f.request_id;
  if (!found) {  // closed meanwhile (its close unfollows; this is the belt to that brace)
    const SessionId gone = f.session;
    std::erase_if(followers_, [&](const Follower& g) { return g.session == gone; });
    maybe_close_log();
    return false;
  }
  Session& session = *found;
  bool done = false;
  if (session.has_room()) f.stalled_since_ms = 0;
  while (session.has_room()) {
    if (budget && *budget == 0) break;
    auto entry = log_->read(f.cursor, scratch_);
    if (!entry) {
      session.send(protocol::encode_error(request_id, "internal", entry.error().message));
      done = true;
      break;
    }
    if (!*entry) {
      // Past the log's end: a terminal record it could not take yet comes from memory.
      if (!unlogged_terminal_.empty() && f.cursor.next_seq == log_->last_seq() + 1) {
        session.send(protocol::with_request_id(request_id, unlogged_terminal_));
        ++f.cursor.next_seq;
      }
      break;
    }
    const auto& e = **entry;
    std::optional<int64_t> truncated = e.truncated_before_seq ? e.truncated_before_seq : f.truncated_before_seq;
    f.truncated_before_seq.reset();
    std::string record;
    if (e.kind == JobLog::Kind::kRecord) {
      record = std::string(e.payload);
      if (truncated) record = fmt::format("{{\"truncated_before_seq\":{},{}", *truncated, record.substr(1));
    } else {
      record = protocol::encode_output(e.seq, e.kind == JobLog::Kind::kStdout ? "stdout" : "stderr", e.payload, truncated);
    }
    if (budget) *budget -= std::min(*budget, record.size());
    session.send(protocol::with_request_id(request_id, record));
  }
  // Once the job is finished and this follower has had its last record (the terminal one), the
  // follow is over, however that record reached it.
  if (state_ == State::kFinished && f.cursor.next_seq > last_seq()) done = true;
  if (!done && !session.has_room() && f.cursor.next_seq <= last_seq() && f.stalled_since_ms == 0) {
    f.stalled_since_ms = uv_now(runner_.loop());
  }
  const bool cut_short = !done && budget && *budget == 0 && session.has_room() && f.cursor.next_seq <= last_seq();
  if (done) {
    std::erase(session.followed_jobs(), id_);
    std::erase_if(followers_, [&](const Follower& g) { return g.session == session.id() && g.request_id == request_id; });
    maybe_close_log();
  }
  return cut_short;
}

}  // namespace motor::runner
