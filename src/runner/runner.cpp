#include "runner/runner.hpp"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "motor/sys_error.hpp"
#include "motor/version.hpp"
#include "reactor/slow_call.hpp"
#include "base/log.hpp"
#include "runner/runner_lock.hpp"
#include "runner/session.hpp"
#include "runner/state_store.hpp"

namespace motor::runner {
namespace {

constexpr uint64_t kExitFlushMs = 2000;
constexpr uint64_t kMetricsEveryMs = 15000;
constexpr uint64_t kHistorySweepMs = 3600 * 1000;
// Expired histories removed per loop iteration at most (each a stat and, if there, a removal).
constexpr size_t kHistoriesPerSweep = 256;
// Fresh network namespaces the job starter keeps ready (sandbox/netns_pool.hpp): enough for a
// burst of starts; each costs the kernel a few tens of KiB while it waits.
constexpr size_t kNetnsPoolSize = 4;

Status make_dir(const std::string& path, mode_t mode) {
  // Missing parents are created root-owned 0755, like mkdir -p.
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
    const std::string parent = path.substr(0, at);
    if (mkdir(parent.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("creating " + parent);
  }
  if (mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sys_error("creating " + path);
  if (chmod(path.c_str(), mode) < 0) return sys_error("chmod " + path);
  return {};
}


// MemTotal of /proc/meminfo, in bytes (0 if unreadable).
int64_t host_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

// The busy time after which a loop iteration leaves its further heavy steps (a job's start or
// end, the job starter's answer, a request) to the next ones (reactor/iteration_budget.hpp): on
// a loaded 2-CPU host a piece of 200 us of CPU took at most about 2 ms of wall time during a
// burst of starts, 500 us up to 4.5 ms (bench/README.md). MOTOR_LOOP_BUDGET_US overrides it for
// the benchmarks (0: no budget).
constexpr uint64_t kLoopStepBudgetUs = 250;

uint64_t loop_step_budget_us() {
  const char* set = std::getenv("MOTOR_LOOP_BUDGET_US");
  if (!set || *set == '\0') return kLoopStepBudgetUs;
  char* end = nullptr;
  const unsigned long long us = std::strtoull(set, &end, 10);
  return end && *end == '\0' ? us : kLoopStepBudgetUs;
}

}  // namespace

Runner::Runner(uv_loop_t* loop, config::Config config)
    : loop_(loop),
      config_(std::move(config)),
      cgroup_reaper_(loop),
      stall_(loop),
      step_budget_(stall_, loop_step_budget_us()),
      notifier_(loop),
      parser_(std::make_unique<simdjson::dom::parser>(protocol::kMaxFrameBytes)),
      admission_(loop, static_cast<size_t>(config_.max_queued_jobs), *this) {
  started_hr_ns_ = uv_hrtime();
  register_methods();
}

Runner::~Runner() {
  if (sandbox_pool_) sandbox_pool_->clear();  // its motor-inits are killed; its cgroup goes to the reaper
  // A sandbox the starter may still be building into the pool's cgroup: no more of those, so the
  // reaper below can empty and remove it.
  job_starter_.stop();
  // A clean shutdown: every job has ended and its cgroup is gone; the parent goes too (after a
  // kill -9 it stays, and the next start cleans what is under it).
  cgroup_reaper_.reap_all_now();
  if (shutting_down_ && cgroups_) {
    if (auto s = cgroups_->remove_parent(); !s) log_warning("leaving the cgroup parent: {}", s.error().message);
  }
}

namespace {

// The layout's driver, its busy cgroups ending through `reaper`, and the parent's lock (`lock`).
Expected<std::unique_ptr<sandbox::CgroupDriver>> open_cgroups(const config::Config& config, sandbox::CgroupReaper& reaper,
                                                              UniqueFd& lock) {
  auto pref = sandbox::CgroupPreference::kAuto;
  if (config.cgroup_mode == config::CgroupMode::kV1) pref = sandbox::CgroupPreference::kV1;
  if (config.cgroup_mode == config::CgroupMode::kV2) pref = sandbox::CgroupPreference::kV2;
  auto cgroups = sandbox::detect_cgroups(config.cgroup_parent, pref);
  if (!cgroups) return cgroups.error();
  (*cgroups)->set_reaper(&reaper);
  // Recovery kills and removes every job cgroup under the parent: never another runner's.
  auto cgroup_lock = lock_cgroup_parent("/sys/fs/cgroup", config.cgroup_parent);
  if (!cgroup_lock) return cgroup_lock.error();
  lock = std::move(*cgroup_lock);
  log_info("cgroups: {} layout, parent \"{}\"", (*cgroups)->layout(), config.cgroup_parent);
  return std::move(*cgroups);
}

}  // namespace

Status Runner::start() {
  reactor::SlowCall::set_reporter([](std::string_view what, uint64_t us) {
    log_warning("{} stalled the loop for {:.1f} ms", what, static_cast<double>(us) / 1000.0);
  });
  // A diagnostic (bench/README.md): what the iterations that stalled the loop this long ran.
  if (const char* trace = std::getenv("MOTOR_LOOP_TRACE_US"); trace && std::atoi(trace) > 0) {
    stall_.trace_from(static_cast<uint64_t>(std::atoi(trace)), [](uint64_t wall_us, uint64_t cpu_us, const std::string& calls) {
      log_info("loop trace: an iteration of {} us (CPU {} us): {}", wall_us, cpu_us, calls);
    });
  }
  auto account = sandbox::lookup_unprivileged_account(config_.job_user);
  if (!account) return account.error();
  job_account_ = *account;
  if (group* g = getgrgid(job_account_.gid)) job_group_name_ = g->gr_name;
  else job_group_name_ = job_account_.name;

  init_path_ = config_.init_path;
  if (init_path_.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      std::string exe(self, static_cast<size_t>(n));
      init_path_ = exe.substr(0, exe.rfind('/')) + "/motor-init";
    }
  }
  for (const auto& cache : config_.cache_paths) {
    struct stat st {};
    if (stat(cache.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return make_error("config", fmt::format("cache_paths: {} is not a directory; create it or remove it from the config", cache));
    }
  }
  if (access(init_path_.c_str(), X_OK) != 0) {
    return make_error("config", fmt::format("motor-init is not at {}: build it (it is built beside motor-runner) or set "
                                            "init_path in the config", init_path_));
  }

  if (auto s = make_dir(config_.state_dir, 0711); !s) return s;
  // Before anything of the directory is read or changed: a second runner stops here.
  auto state_lock = lock_state_dir(config_.state_dir);
  if (!state_lock) return state_lock.error();
  state_dir_lock_ = std::move(*state_lock);
  remove_interrupted_saves(config_.state_dir);
  if (auto s = make_dir(config_.state_dir + "/jobs", 0700); !s) return s;
  // New jobs' logs, made ahead on libuv's pool (job_log_stock.hpp) on the jobs' filesystem.
  log_stock_ = std::make_unique<JobLogStock>(loop_, config_.state_dir + "/ready-logs", kReadyJobLogs);
  log_stock_->refill();

  auto cgroups = open_cgroups(config_, cgroup_reaper_, cgroup_parent_lock_);
  if (!cgroups) return cgroups.error();
  cgroups_ = std::move(*cgroups);

  // Job memory caps are reserved against the host's memory less the operator's reserve.
  memory_budget_ = std::max<int64_t>(0, host_memory_bytes() - config_.memory_reserve_bytes);
  metrics_.set_cpus_total(static_cast<double>(cpu_claims_.cpu_count()));
  metrics_.set_start_time_seconds(static_cast<double>(std::time(nullptr)));

  if (auto s = start_workspaces(); !s) return s;
  if (auto s = start_cache_fills(); !s) return s;
  // Spares of the published warm targets (a runner before may have left them ready or part-made).
  for (const auto& [name, f] : cache_fills_.repositories()) {
    if (!f.published_commit.empty()) workspaces_->want_warm_spare(f.caller, f.repository_root);
  }
  if (auto s = start_cache_sweeps(); !s) return s;
  return start_systemd_backend();  // then start_rest(): before recover(), it stops the leftover units
}

Status Runner::start_rest() {
  if (auto s = recover(); !s) return s;
  if (config_.outbound_network) {
    auto outbound = netpolicy::Outbound::start(loop_, config::outbound_settings(config_));
    if (!outbound) return outbound.error();
    outbound_ = std::move(*outbound);
  } else {
    netpolicy::Outbound::remove_leftovers(config::outbound_settings(config_));
  }
  // Forked before the socket exists and before any job: the helper holds nothing of either.
  if (auto s = state_writer_.start(loop_, config_.state_dir); !s) {
    log_warning("no state writer process ({}); the job table is saved on the loop", s.error().message);
  }
  // Likewise forked early: small and quiet, so each job's clone3 copies little (job_starter.hpp).
  // With the driver: the helper makes each job's cgroup (SpawnSpec::make_cgroup), off the loop.
  if (auto s = job_starter_.start(loop_, kNetnsPoolSize, cgroups_.get()); !s) {
    log_warning("no job starter process ({}); jobs are started by the runner itself", s.error().message);
  }
  configure_sandbox_pool();
  // After the state writer's fork: libvirt's connection is the runner's alone.
  vm_host_ = VmHost::create(loop_, config_, init_path_, systemd_units_.get());
  awaiting_recovery_ = true;
  if (recovery_scans_ == 0) {
    evict_finished();
    (void)save_state();
    if (auto s = listen(); !s) return s;
    return start_timers_and_signals();
  }
  log_info("recovery: {} lost job(s) have their workspace scanned; listening once that ends", recovery_scans_);
  return {};
}

void Runner::finish_start() {
  evict_finished();
  (void)save_state();
  Status s = listen();
  if (s) s = start_timers_and_signals();
  if (!s) abandon_start(s.error());
}

void Runner::abandon_start(const Error& e) {
  log_error("cannot start: {}", e.message);
  start_failure_ = e;
  uv_stop(loop_);
}

Status Runner::start_timers_and_signals() {
  // Output histories past their age are deleted now and then (and once at start).
  if (auto s = reactor::uv_status(history_timer_.init(this, uv_timer_init, loop_), "the history timer"); !s) return s;
  if (auto s = reactor::uv_status(uv_timer_start(history_timer_.get(), [](uv_timer_t* h) {
        if (auto* self = reactor::owner_of<Runner>(h)) self->expire_histories();
      }, 0, std::min<uint64_t>(kHistorySweepMs, static_cast<uint64_t>(config_.job_log_max_age_s) * 1000 / 2 + 1)),
                                  "starting the history timer");
      !s) {
    return s;
  }
  uv_unref(history_timer_.handle());
  if (!config_.metrics_file.empty()) {
    if (auto s = reactor::uv_status(metrics_timer_.init(this, uv_timer_init, loop_), "the metrics timer"); !s) return s;
    if (auto s = reactor::uv_status(uv_timer_start(metrics_timer_.get(), [](uv_timer_t* h) {
          if (auto* self = reactor::owner_of<Runner>(h)) self->write_metrics();
        }, 0, kMetricsEveryMs), "starting the metrics timer");
        !s) {
      return s;
    }
    uv_unref(metrics_timer_.handle());
  }

  if (auto s = reactor::uv_status(saver_.init(this, uv_check_init, loop_), "the state saver's check handle"); !s) return s;

  for (auto* sig : {&sigterm_, &sigint_}) {
    if (auto s = reactor::uv_status(sig->init(this, uv_signal_init, loop_), "a signal handle"); !s) return s;
    if (auto s = reactor::uv_status(uv_signal_start(sig->get(), [](uv_signal_t* h, int signum) {
          if (auto* self = reactor::owner_of<Runner>(h)) self->begin_shutdown(signum);
        }, sig == &sigterm_ ? SIGTERM : SIGINT), "taking SIGTERM and SIGINT");
        !s) {
      return s;
    }
  }
  // SIGHUP (a reload by convention, sent by `systemctl reload` and by hangups) must not end the
  // runner and orphan its jobs: it is taken on the loop and reloads the config (runner_reload.cpp).
  if (const int rc = uv_signal_init(loop_, sighup_.get()); rc != 0) {
    return make_error("io", fmt::format("uv_signal_init: {}", uv_strerror(rc)));
  }
  sighup_.initialized(this);
  if (const int rc = uv_signal_start(sighup_.get(), [](uv_signal_t* h, int) {
        if (auto* self = reactor::owner_of<Runner>(h)) self->reload();
      }, SIGHUP); rc != 0) {
    return make_error("io", fmt::format("uv_signal_start(SIGHUP): {}", uv_strerror(rc)));
  }
  signal(SIGPIPE, SIG_IGN);
  log_info("motor-runner {} listening on {} (jobs run as {} uid {})", kVersion, config_.socket_path, job_account_.name,
           job_account_.uid);
  notifier_.ready(fmt::format("listening on {}", config_.socket_path));
  return {};
}

Status Runner::listen() {
  const std::string& path = config_.socket_path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) return make_error("config", "socket_path is too long: " + path);
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("creating " + dir);
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error("config", path + " exists and is not a socket; remove it or pick another socket_path");
    // A socket someone still answers on belongs to a live runner: never steal it.
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::copy(path.begin(), path.end(), addr.sun_path);
    const bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(probe);
    if (live) return make_error("config", "another runner is already listening on " + path);
    unlink(path.c_str());
  }
  if (auto s = reactor::uv_status(listener_.init(this, uv_pipe_init, loop_, 0), "the listening socket"); !s) return s;
  // Created 0660 from the start: no window in which anyone else could connect.
  const mode_t old_umask = umask(0117);
  const int rc = uv_pipe_bind(listener_.get(), path.c_str());
  umask(old_umask);
  if (rc != 0) return make_error("io", fmt::format("binding {}: {}", path, uv_strerror(rc)));
  gid_t gid = 0;
  if (group* g = getgrnam(config_.socket_group.c_str())) {
    gid = g->gr_gid;
  } else {
    log_warning("group \"{}\" does not exist; the socket stays root-only (run scripts/setup)", config_.socket_group);
  }
  if (chown(path.c_str(), 0, gid) < 0) return sys_error("chown " + path);
  if (chmod(path.c_str(), 0660) < 0) return sys_error("chmod " + path);
  const int lrc = uv_listen(listener_.stream(), 128, [](uv_stream_t* server, int status) {
    auto* self = reactor::owner_of<Runner>(server);
    if (!self || status < 0) return;
    Session::accept(*self, server);
  });
  if (lrc != 0) return make_error("io", fmt::format("listening on {}: {}", path, uv_strerror(lrc)));
  return {};
}

void Runner::job_finished(Job& job) {
  reactor::SlowCall timed("finishing a job", reactor::SlowCall::kTraceOnly);
  fill_finished(job);
  cpu_claims_.release(job.cpus());
  if (outbound_) outbound_->release(job.id());
  // Refusals were counted by refused().
  if (job.outcome().kind != protocol::Outcome::Kind::kRefusedBeforeStart) metrics_.job_finished(to_wire(job.outcome().kind));
  evict_finished();
  request_save();
  admission_.schedule();
  update_status();
  answer_drain_waiters();
  // The next sandbox is built as a job ends, not as one starts: on two cores a build beside the
  // command that had just taken a sandbox slowed it by more than the build saved. Not in a burst
  // either (jobs queued or the starter still busy): there each job builds its own, and builds
  // nobody takes only cost the loop CPU it needs then (bench/README.md, session 17).
  if (sandbox_pool_ && admission_.size() == 0 && !job_starter_.busy()) sandbox_pool_->refill();
  if (workspaces_) workspaces_->poke_warm_spares();  // made only once the host is quiet
  if (shutting_down_) maybe_exit();
}

void Runner::remove_history(const std::string& job_id) {
  log_info("job {}: output history older than {} s deleted", job_id, config_.job_log_max_age_s);
  remove_job_dir(job_dir(job_id));
}

// Visits only the jobs past their age (the table's index by end), not the thousands kept.
void Runner::expire_histories() {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const bool more = jobs_.sweep_ended(now - config_.job_log_max_age_s * 1000, [this](Job& job) {
    struct stat st {};
    if (stat(job_dir(job.id()).c_str(), &st) != 0) return true;  // no history left to delete
    if (!job.expire_history()) return false;  // followed right now: the next sweep tries again
    remove_history(job.id());
    return true;
  }, kHistoriesPerSweep);
  // A host that kept thousands of jobs past their age (a restart after a long stop, an upgraded
  // table) sweeps them a few hundred per loop iteration: all at once stalled the loop 8.6 ms at
  // 10,000 (bench/README.md, "Session 20").
  if (more && history_timer_.live()) {
    uv_timer_t* timer = history_timer_.get();
    if (const int rc = uv_timer_start(timer, timer->timer_cb, 0, uv_timer_get_repeat(timer)); rc != 0) {
      log_warning("the rest of the expired histories wait for the next sweep: uv_timer_start: {}", uv_strerror(rc));
    }
  }
}

void Runner::evict_finished() {
  jobs_.evict_finished(static_cast<size_t>(config_.finished_jobs_kept), [this](const std::string& id) {
    remove_job_dir(job_dir(id));
  });
}

void Runner::update_status() {
  const size_t running = jobs_.running();
  notifier_.status(fmt::format("{} running, {} queued, {} sessions{}", running, admission_.size(), sessions_.size(),
                               draining_ ? ", draining" : ""));
  metrics_.set_running(static_cast<int64_t>(running));
  metrics_.set_queued(static_cast<int64_t>(admission_.size()));
  metrics_.set_cpus_claimed(jobs_.cpus_claimed());
  metrics_.set_memory_claimed_bytes(jobs_.memory_reserved());
  metrics_.set_sessions(static_cast<int64_t>(sessions_.size()));
  metrics_.set_draining(draining_);
}

namespace {

// One write of the metrics file, made on libuv's pool: the text is taken on the loop.
struct MetricsWrite {
  uv_work_t req{};
  std::string path, text;
  Status result;
  std::shared_ptr<bool> writing;
};

}  // namespace

void Runner::write_metrics() {
  if (*metrics_writing_) return;  // a disk this slow gets the next tick's figures instead
  metrics_.set_loop_worst_stall_seconds(static_cast<double>(stall_.worst_us()) / 1e6);
  auto write = std::make_unique<MetricsWrite>();
  write->path = config_.metrics_file;
  write->text = metrics_.exposition();
  write->writing = metrics_writing_;
  write->req.data = write.get();
  const int rc = uv_queue_work(
      loop_, &write->req,
      [](uv_work_t* req) {
        auto* w = static_cast<MetricsWrite*>(req->data);
        w->result = write_textfile(w->path, w->text);
      },
      [](uv_work_t* req, int status) {
        std::unique_ptr<MetricsWrite> w(static_cast<MetricsWrite*>(req->data));
        *w->writing = false;
        if (status != 0) return;  // cancelled: the loop is ending
        if (!w->result) log_warning("writing metrics to {}: {}", w->path, w->result.error().message);
      });
  if (rc != 0) {
    log_warning("writing metrics to {}: uv_queue_work: {}", config_.metrics_file, uv_strerror(rc));
    return;
  }
  *metrics_writing_ = true;
  (void)write.release();  // the after-work callback owns it now
}

void Runner::begin_shutdown(int signum) {
  if (shutting_down_) return;
  shutting_down_ = true;
  if (sandbox_pool_) sandbox_pool_->clear();
  log_info("signal {}: shutting down ({} jobs running, policy: {})", signum, jobs_.running(),
           config_.shutdown == config::ShutdownPolicy::kKill ? "kill" : "finish");
  notifier_.stopping();
  listener_.close();
  // Queued jobs never start now: nobody cancelled them, the runner refuses them for the time
  // being (submit them again).
  for (const auto& id : admission_.stop()) {
    if (Job* job = jobs_.find(id)) {
      refuse_queued(*job, protocol::RefusalReason::kRunnerDraining,
                    "the runner shut down before the job started; submit it again", kRetryWhenDrainingMs);
    }
  }
  unlink(config_.socket_path.c_str());
  if (const int rc = uv_timer_init(loop_, shutdown_timer_.get()); rc != 0) {
    log_error("uv_timer_init: {}; the running jobs are killed now", uv_strerror(rc));
  } else {
    shutdown_timer_.initialized(this);
  }
  if (config_.shutdown == config::ShutdownPolicy::kKill || !shutdown_timer_.live()) {
    kill_for_shutdown();
  } else if (const int rc = uv_timer_start(shutdown_timer_.get(), [](uv_timer_t* h) {
               auto* self = reactor::owner_of<Runner>(h);
               if (!self) return;
               log_info("shutdown grace period over; killing the jobs still running");
               self->kill_for_shutdown();
             }, static_cast<uint64_t>(config_.shutdown_grace_s) * 1000, 0); rc != 0) {
    log_error("uv_timer_start: {}; the running jobs are killed now", uv_strerror(rc));
    kill_for_shutdown();
  }
  maybe_exit();
}

void Runner::kill_for_shutdown() {
  for (Job* job : jobs_.running_jobs()) job->kill_for_shutdown();
}

void Runner::maybe_exit() {
  if (jobs_.running() > 0) return;
  // The last records (the terminal ones) go out before the sessions close.
  while (!fan_out_jobs_.empty()) fan_out_slice();
  state_writer_.stop();  // its last write lands first; then the final state, here
  (void)save_state();
  // Let clients receive their terminal records and why the connection ends, then stop: to a
  // client between two requests a bare EOF looks like a runner that died.
  std::vector<Session*> open;
  for (const auto& [sid, s] : sessions_) open.push_back(s);
  for (Session* s : open) {
    s->send(protocol::encode_error(std::nullopt, "runner_draining",
                                   "the runner is shutting down; this connection closes (connect again once it is back)"));
    s->close_after_flush();
  }
  if (shutdown_timer_.live()) {
    uv_timer_stop(shutdown_timer_.get());
    if (uv_timer_start(shutdown_timer_.get(), [](uv_timer_t* h) {
          if (auto* self = reactor::owner_of<Runner>(h)) uv_stop(self->loop_);
        }, kExitFlushMs, 0) != 0) {
      uv_stop(loop_);
    }
  }
  if (sessions_.empty()) uv_stop(loop_);
}

}  // namespace motor::runner
