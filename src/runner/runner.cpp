#include "runner/runner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <chrono>
#include <thread>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "motor/version.hpp"
#include "reactor/slow_call.hpp"
#include "runner/env_filter.hpp"
#include "runner/job_id.hpp"
#include "runner/log.hpp"
#include "runner/runner_lock.hpp"
#include "runner/session.hpp"
#include "runner/sha256.hpp"
#include "runner/state_store.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::runner {
namespace {

using protocol::JsonWriter;

constexpr uint64_t kExitFlushMs = 2000;
constexpr size_t kListLimit = 500;
constexpr uint64_t kMetricsEveryMs = 15000;
constexpr uint64_t kHistorySweepMs = 3600 * 1000;
// Fresh network namespaces the job starter keeps ready (sandbox/netns_pool.hpp): enough for a
// burst of starts; each costs the kernel a few tens of KiB while it waits.
constexpr size_t kNetnsPoolSize = 4;
// Where a job sees its workspace (its cwd is below it, its $HOME is it).
constexpr const char* kWorkspaceInJob = "/workspace";
constexpr const char* kSiblingsInJob = "/siblings";

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

// Removes a job's history directory (flat: log segments and a side file).
void remove_job_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string_view n(e->d_name);
      if (n != "." && n != "..") unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

const char* state_name(const Job& job) {
  switch (job.state()) {
    case Job::State::kQueued: return "queued";
    case Job::State::kRunning: return "running";
    case Job::State::kFinished: return "finished";
  }
  return "finished";
}

// At start-up only (before the loop serves anyone): kills what a dead runner left in a job
// cgroup, waits up to 10 s for it to empty, and removes it.
Status kill_and_remove(sandbox::JobCgroup& cg) {
  (void)cg.kill_all();
  for (int i = 0; i < 2000; ++i) {
    auto populated = cg.populated();
    if (!populated || !*populated) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cg.remove();
}

void restore_secret_digest(Job& job, const std::string& hex) {
  Sha256Digest d{};
  if (!hex.empty() && from_hex(hex, d)) job.set_secret_digest(d);
}

// What an unknown job id is compared against, so it costs what a wrong secret costs.
const Sha256Digest kDummyDigest = sha256("motor: no such job");

std::string summarize(const protocol::RunParams& p) {
  std::string s;
  if (p.command) {
    s = *p.command;
  } else {
    for (const auto& a : p.argv) {
      if (!s.empty()) s.push_back(' ');
      s += a;
    }
  }
  // One line for listings and logs: whitespace runs (newlines included) become one space.
  std::string line;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (space && (line.empty() || line.back() == ' ')) continue;
    line.push_back(space ? ' ' : c);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

}  // namespace

Runner::Runner(uv_loop_t* loop, Config config)
    : loop_(loop),
      config_(std::move(config)),
      cgroup_retirement_(loop),
      stall_(loop),
      notifier_(loop),
      parser_(protocol::kMaxFrameBytes),
      queue_(static_cast<size_t>(config_.max_queued_jobs)) {
  started_hr_ns_ = uv_hrtime();
}

Runner::~Runner() {
  // A clean shutdown: every job has ended and its cgroup is gone; the parent goes too (after a
  // kill -9 it stays, and the next start cleans what is under it).
  cgroup_retirement_.remove_now();
  if (shutting_down_ && cgroups_) {
    if (auto s = cgroups_->remove_parent(); !s) log_warning("leaving the cgroup parent: {}", s.error().message);
  }
}

Status Runner::start() {
  reactor::SlowCall::set_reporter([](std::string_view what, uint64_t us) {
    log_warning("{} stalled the loop for {:.1f} ms", what, static_cast<double>(us) / 1000.0);
  });
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

  auto pref = sandbox::CgroupPreference::kAuto;
  if (config_.cgroup_mode == CgroupMode::kV1) pref = sandbox::CgroupPreference::kV1;
  if (config_.cgroup_mode == CgroupMode::kV2) pref = sandbox::CgroupPreference::kV2;
  auto cgroups = sandbox::detect_cgroups(config_.cgroup_parent, pref);
  if (!cgroups) return cgroups.error();
  cgroups_ = std::move(*cgroups);
  // Recovery kills and removes every job cgroup under the parent: never another runner's.
  auto cgroup_lock = lock_cgroup_parent("/sys/fs/cgroup", config_.cgroup_parent);
  if (!cgroup_lock) return cgroup_lock.error();
  cgroup_parent_lock_ = std::move(*cgroup_lock);
  log_info("cgroups: {} layout, parent \"{}\"", cgroups_->layout(), config_.cgroup_parent);

  // Job memory caps are reserved against the host's memory less the operator's reserve.
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    while (meminfo >> key >> kib) {
      if (key == "MemTotal:") break;
      meminfo.ignore(256, '\n');
    }
    memory_budget_ = std::max<int64_t>(0, kib * 1024 - config_.memory_reserve_bytes);
  }
  metrics_.set_cpus_total(static_cast<double>(cpu_claims_.cpu_count()));
  metrics_.set_start_time_seconds(static_cast<double>(std::time(nullptr)));

  if (auto s = start_workspaces(); !s) return s;
  if (auto s = recover(); !s) return s;
  if (config_.outbound_network) {
    auto outbound = Outbound::start(loop_, config_);
    if (!outbound) return outbound.error();
    outbound_ = std::move(*outbound);
  } else {
    Outbound::remove_leftovers(config_);
  }
  // Forked before the socket exists and before any job: the helper holds nothing of either.
  if (auto s = state_writer_.start(loop_, config_.state_dir); !s) {
    log_warning("no state writer process ({}); state.json is saved on the loop", s.error().message);
  }
  // Likewise forked early: small and quiet, so each job's clone3 copies little (job_starter.hpp).
  if (auto s = job_starter_.start(loop_, kNetnsPoolSize); !s) {
    log_warning("no job starter process ({}); jobs are started by the runner itself", s.error().message);
  }
  // After the state writer's fork: libvirt's connection is the runner's alone.
  vm_host_ = VmHost::create(loop_, config_, init_path_);
  if (auto s = listen(); !s) return s;
  // Output histories past their age are deleted now and then (and once at start).
  uv_timer_init(loop_, history_timer_.get());
  history_timer_.initialized(this);
  uv_timer_start(history_timer_.get(), [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<Runner>(h)) self->expire_histories();
  }, 0, std::min<uint64_t>(kHistorySweepMs, static_cast<uint64_t>(config_.job_log_max_age_s) * 1000 / 2 + 1));
  uv_unref(history_timer_.handle());
  if (!config_.metrics_file.empty()) {
    uv_timer_init(loop_, metrics_timer_.get());
    metrics_timer_.initialized(this);
    uv_timer_start(metrics_timer_.get(), [](uv_timer_t* h) {
      if (auto* self = reactor::owner_of<Runner>(h)) self->write_metrics();
    }, 0, kMetricsEveryMs);
    uv_unref(metrics_timer_.handle());
  }

  uv_check_init(loop_, saver_.get());
  saver_.initialized(this);

  for (auto* sig : {&sigterm_, &sigint_}) {
    uv_signal_init(loop_, sig->get());
    sig->initialized(this);
    uv_signal_start(sig->get(), [](uv_signal_t* h, int signum) {
      if (auto* self = reactor::owner_of<Runner>(h)) self->begin_shutdown(signum);
    }, sig == &sigterm_ ? SIGTERM : SIGINT);
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

Status Runner::recover() {
  auto state = load_state(config_.state_dir);
  if (!state) return state.error();
  draining_ = state->draining;
  std::set<std::string> known_cgroups;
  for (auto& pj : state->jobs) {
    if (!protocol::is_job_id(pj.job_id)) continue;
    if (pj.state == "finished" && !pj.terminal_json.empty()) {
      jobs_[pj.job_id] = Job::restore(*this, pj.job_id, pj.caller, pj.workspace_key, pj.summary, pj.created_at_ms,
                                      pj.terminal_json);
      restore_secret_digest(*jobs_[pj.job_id], pj.secret_sha256);
      continue;
    }
    if (pj.state == "queued") {
      // state.json is written asynchronously: a job may have started after its last save said
      // "queued". If its cgroup exists (made just before the spawn) or its log has records, it
      // may have run: it is accounted for like a running one, never as "not started".
      const std::string cgroup = "job-" + pj.job_id;
      const bool has_cgroup = static_cast<bool>(cgroups_->open(cgroup));
      auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes);
      if (has_cgroup || (log && log->last_seq() > 0)) {
        pj.state = "running";
        pj.cgroup = cgroup;
      }
    }
    if (pj.state == "queued") {
      // It never started: the restart refuses it (transient; nobody cancelled it).
      protocol::TerminalRecord t;
      t.job_id = pj.job_id;
      t.outcome.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
      t.outcome.reason = "runner_draining";
      t.retry_after_ms = kRetryWhenDrainingMs;
      t.ran = "none";
      t.refusal_detail = "the runner restarted before the job started; submit it again";
      std::string terminal;
      if (auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes)) {
        t.seq = log->last_seq() + 1;
        terminal = protocol::encode_terminal(t);
        (void)log->append(JobLog::Kind::kRecord, terminal);
      } else {
        terminal = protocol::encode_terminal(t);
      }
      log_warning("job {} was queued when the runner stopped; it is recorded as refused before start (runner_draining)", pj.job_id);
      jobs_[pj.job_id] = Job::restore(*this, pj.job_id, pj.caller, pj.workspace_key, pj.summary, pj.created_at_ms, terminal);
      restore_secret_digest(*jobs_[pj.job_id], pj.secret_sha256);
      continue;
    }
    // A job of a runner that died: kill whatever is left of it, and say we do not know how it
    // ended rather than lose it.
    if (!pj.cgroup.empty()) {
      known_cgroups.insert(pj.cgroup);
      if (auto cg = cgroups_->open(pj.cgroup)) {
        if (auto s = kill_and_remove(**cg); !s) log_warning("job {}: removing its cgroup: {}", pj.job_id, s.error().message);
      }
    }
    protocol::TerminalRecord t;
    t.job_id = pj.job_id;
    t.outcome.kind = protocol::Outcome::Kind::kOutcomeUnknown;
    t.ran = "remote";
    std::string terminal;
    if (auto log = JobLog::open(job_dir(pj.job_id), config_.job_log_max_bytes)) {
      // The job may have ended and had its terminal record logged just before the crash.
      if (auto logged = log->last_terminal()) terminal = std::move(*logged);
      if (terminal.empty()) {
        t.seq = log->last_seq() + 1;
        terminal = protocol::encode_terminal(t);
        if (auto seq = log->append(JobLog::Kind::kRecord, terminal); !seq) {
          log_warning("job {}: {}", pj.job_id, seq.error().message);
        }
      }
    } else {
      terminal = protocol::encode_terminal(t);
    }
    if (terminal.find("outcome_unknown") != std::string::npos) metrics_.job_finished("outcome_unknown");
    log_warning("job {} was running when the runner stopped; its processes were killed; outcome: {}", pj.job_id,
                terminal.find("outcome_unknown") != std::string::npos ? "unknown" : "recorded before the stop");
    jobs_[pj.job_id] = Job::restore(*this, pj.job_id, pj.caller, pj.workspace_key, pj.summary, pj.created_at_ms, terminal);
    restore_secret_digest(*jobs_[pj.job_id], pj.secret_sha256);
  }
  // Job cgroups that no record names (the runner died between creating one and saving state).
  for (const auto& name : cgroups_->list()) {
    if (known_cgroups.count(name) || name.starts_with(helper_cgroup_prefix())) continue;  // this runner's helper
    if (auto cg = cgroups_->open(name)) {
      log_warning("removing the leftover cgroup {}", name);
      if (auto s = kill_and_remove(**cg); !s) log_warning("removing the leftover cgroup {}: {}", name, s.error().message);
    }
  }
  evict_finished();
  (void)save_state();
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
  uv_pipe_init(loop_, listener_.get(), 0);
  listener_.initialized(this);
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

void Runner::session_opened(Session* session) {
  if (shutting_down_) {
    session->send(protocol::encode_error(std::nullopt, "runner_draining", "the runner is shutting down"));
    session->close_after_flush();
    return;
  }
  bool allowed = session->privileged() ||
                 std::find(config_.allowed_uids.begin(), config_.allowed_uids.end(), session->peer_uid()) !=
                     config_.allowed_uids.end();
  if (!allowed) {
    std::vector<gid_t> groups{session->peer_gid()};
    char buf[4096];
    passwd pw{};
    passwd* found = nullptr;
    if (getpwuid_r(session->peer_uid(), &pw, buf, sizeof buf, &found) == 0 && found) {
      int n = 256;
      groups.resize(static_cast<size_t>(n));
      if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) >= 0) groups.resize(static_cast<size_t>(n));
      else groups = {session->peer_gid()};
    }
    for (const auto& name : config_.allowed_groups) {
      if (group* g = getgrnam(name.c_str())) {
        if (std::find(groups.begin(), groups.end(), g->gr_gid) != groups.end()) allowed = true;
      }
    }
  }
  if (!allowed) {
    log_warning("refused a connection from uid {} pid {}: not in allowed_uids or allowed_groups", session->peer_uid(),
                session->peer_pid());
    session->send(protocol::encode_error(std::nullopt, "unauthorized",
                                         "this account may not use the runner; ask the operator to add it to "
                                         "allowed_uids or one of allowed_groups"));
    session->close_after_flush();
    return;
  }
  if (sessions_.size() >= static_cast<size_t>(config_.max_sessions)) {
    session->send(protocol::encode_error(std::nullopt, "runner_full", "too many open sessions; try again later"));
    session->close_after_flush();
    return;
  }
  // One account cannot take every session (the operator's and the bridge's are not counted
  // here; a bridged caller is counted once it is named, in runner.identify).
  if (!session->privileged() && sessions_of(*session) >= static_cast<size_t>(config_.max_sessions_per_uid)) {
    log_warning("refused a connection from uid {}: it has {} sessions open (max_sessions_per_uid)", session->peer_uid(),
                config_.max_sessions_per_uid);
    session->send(protocol::encode_error(
        std::nullopt, "runner_full",
        fmt::format("this account has {} sessions open, the most one account may have (max_sessions_per_uid); "
                    "try again later",
                    config_.max_sessions_per_uid)));
    session->close_after_flush();
    return;
  }
  sessions_.emplace(session->id(), session);
  if (!session_sweep_.live()) {
    if (const int rc = uv_timer_init(loop_, session_sweep_.get()); rc != 0) {
      log_error("uv_timer_init: {}; sessions have no idle or frame timeout", uv_strerror(rc));
      return;
    }
    session_sweep_.initialized(this);
    uv_unref(session_sweep_.handle());
    const uint64_t every_ms = 1000;
    if (const int rc = uv_timer_start(session_sweep_.get(), [](uv_timer_t* h) {
          if (auto* self = reactor::owner_of<Runner>(h)) self->sweep_sessions();
        }, every_ms, every_ms); rc != 0) {
      log_error("uv_timer_start: {}; sessions have no idle or frame timeout", uv_strerror(rc));
    }
  }
}

size_t Runner::sessions_of(const Session& session) const {
  size_t n = 0;
  for (const auto& [sid, s] : sessions_) {
    if (s == &session || s->privileged() || s->bridged() != session.bridged()) continue;
    n += session.bridged() ? s->caller() == session.caller() : s->peer_uid() == session.peer_uid();
  }
  return n;
}

// A connection that began a frame and did not finish it, or that has nothing to wait for and
// sends nothing, holds a session slot for nothing: it is closed after its timeout.
void Runner::sweep_sessions() {
  cut_off_unread();
  const uint64_t now = uv_now(loop_);
  const uint64_t frame_ms = static_cast<uint64_t>(config_.frame_timeout_s) * 1000;
  const uint64_t idle_ms = static_cast<uint64_t>(config_.session_idle_timeout_s) * 1000;
  std::vector<std::pair<Session*, std::string>> expired;
  for (const auto& [sid, s] : sessions_) {
    if (s->closed()) continue;
    if (s->frame_begun_ms() != 0 && now - s->frame_begun_ms() >= frame_ms) {
      expired.emplace_back(s, fmt::format("a frame was begun and not finished within {} s (frame_timeout_s); "
                                          "closing this connection",
                                          config_.frame_timeout_s));
    } else if (s->quiet() && now - s->last_received_ms() >= idle_ms) {
      expired.emplace_back(s, fmt::format("this connection sent nothing and waited for nothing for {} s "
                                          "(session_idle_timeout_s); closing it",
                                          config_.session_idle_timeout_s));
    }
  }
  for (auto& [s, why] : expired) {
    log_info("session {} (uid {}): {}", s->caller(), s->peer_uid(), why);
    s->send(protocol::encode_error(std::nullopt, "session_timeout", why));
    s->close_after_flush();
  }
}

void Runner::buffered_changed(int64_t delta) {
  const bool had_room = buffered_has_room();
  buffered_bytes_ += delta;
  buffered_peak_bytes_ = std::max(buffered_peak_bytes_, buffered_bytes_);
  // Back under the total: followers and requests that paused for it are served again.
  if (!had_room && buffered_has_room()) wake_followers_ = true;
  if (!wake_followers_ || !saver_.live()) return;
  // After this iteration, not from inside a send, whose caller may be walking a job's followers.
  if (!shedder_.live()) {
    if (uv_check_init(loop_, shedder_.get()) != 0) return;
    shedder_.initialized(this);
  }
  if (uv_is_active(shedder_.handle())) return;
  if (const int rc = uv_check_start(shedder_.get(), [](uv_check_t* h) {
        uv_check_stop(h);
        auto* self = reactor::owner_of<Runner>(h);
        if (!self) return;
        if (std::exchange(self->wake_followers_, false)) {
          for (auto& [id, job] : self->jobs_) {
            if (job->has_followers()) job->pump_all();
          }
          std::vector<SessionId> open;
          for (const auto& [sid, s] : self->sessions_) open.push_back(sid);
          for (SessionId sid : open) {
            if (Session* s = self->find_session(sid)) s->resume();
          }
        }
      }); rc != 0) {
    log_error("uv_check_start: {}", uv_strerror(rc));
  }
}

// Followers are fed in slices of at most this many bytes per loop iteration, all jobs together:
// a fan-out to a thousand followers with room for 1 MiB each would otherwise encode and queue
// a gigabyte before the loop could serve anyone else.
constexpr size_t kFanOutSliceBytes = 4u << 20;

void Runner::schedule_fan_out(const std::string& job_id) {
  fan_out_jobs_.push_back(job_id);
  if (!fan_out_.live()) {
    if (const int rc = uv_idle_init(loop_, fan_out_.get()); rc != 0) {
      log_error("uv_idle_init: {}", uv_strerror(rc));
      return;
    }
    fan_out_.initialized(this);
  }
  if (uv_is_active(fan_out_.handle())) return;
  if (const int rc = uv_idle_start(fan_out_.get(), [](uv_idle_t* h) {
        if (auto* self = reactor::owner_of<Runner>(h)) self->fan_out_slice();
      }); rc != 0) {
    log_error("uv_idle_start: {}", uv_strerror(rc));
  }
}

void Runner::fan_out_slice() {
  size_t budget = kFanOutSliceBytes;
  // Jobs queued during this slice wait for the next one: each iteration's work stays bounded.
  for (size_t n = fan_out_jobs_.size(); n > 0 && budget > 0 && !fan_out_jobs_.empty(); --n) {
    const std::string id = std::move(fan_out_jobs_.front());
    fan_out_jobs_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    if (it->second->pump_slice(budget)) fan_out_jobs_.push_back(id);
  }
  if (fan_out_jobs_.empty()) uv_idle_stop(fan_out_.get());
}

void Runner::cut_off_unread() {
  if (buffered_has_room()) return;
  // At the total, the clients that hold a full buffer and have read nothing of it for
  // stalled_client_timeout_s are cut off: they hold what the clients that do read wait for.
  const uint64_t now = uv_now(loop_);
  const uint64_t grace_ms = static_cast<uint64_t>(config_.stalled_client_timeout_s) * 1000;
  std::vector<Session*> unread;
  for (const auto& [sid, s] : sessions_) {
    if (!s->closed() && s->unread() && now - s->last_read_by_client_ms() >= grace_ms) unread.push_back(s);
  }
  const size_t cut = unread.size();
  for (Session* s : unread) s->close();  // what it had not read is in the jobs' histories: it reattaches
  if (cut > 0) {
    log_warning("{} bytes queued to clients, at client_buffer_total; cut off {} client(s) that read nothing for {} s",
                buffered_bytes_, cut, config_.stalled_client_timeout_s);
  }
}

Session* Runner::find_session(SessionId id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

void Runner::session_closed(Session& session) {
  sessions_.erase(session.id());
  if (workspaces_) workspaces_->session_closed(static_cast<uint64_t>(session.id()));
  for (const auto& id : std::vector<std::string>(session.followed_jobs())) {
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second->unfollow(session);
  }
  session.followed_jobs().clear();
  if (shutting_down_ && sessions_.empty() && running_jobs() == 0) uv_stop(loop_);
}

void Runner::session_drained(Session& session) {
  for (const auto& id : std::vector<std::string>(session.followed_jobs())) {
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second->session_drained(session);
  }
}

void Runner::handle_frame(Session& session, const std::string& frame) {
  std::optional<int64_t> id;
  auto request = protocol::parse_request(parser_, frame, &id);
  if (!request) {
    session.send(protocol::encode_error(id, request.error().code, request.error().message));
    return;
  }
  dispatch(session, *request);
}

void Runner::dispatch(Session& session, const protocol::Request& r) {
  const std::string& m = r.method;
  if (m == "exec.run") return handle_run(session, r);
  if (m == "exec.cancel") return handle_cancel(session, r);
  if (m == "exec.attach") return handle_attach(session, r);
  if (m == "exec.status") return handle_status(session, r);
  if (m == "exec.list") return handle_list(session, r);
  if (m == "runner.status") return handle_runner_status(session, r);
  if (m.starts_with("workspace.")) return handle_workspace(session, r);
  if (m == "runner.drain") return handle_drain(session, r, true);
  if (m == "runner.resume") return handle_drain(session, r, false);
  if (m == "runner.hello") {
    JsonWriter w;
    w.begin_object().field("runner", "motor-runner").field("version", kVersion).field("protocol", kProtocolVersion);
    w.field("caller", session.caller()).end_object();
    return session.send(protocol::encode_result(r.id, w.str()));
  }
  if (m == "runner.identify") {
    // Only the bridge (`motor-runner connect`, running as the runner's account) names callers.
    if (!session.privileged()) {
      return session.send(protocol::encode_error(r.id, "unauthorized", "only the runner's own account may name a caller"));
    }
    auto caller = protocol::parse_identify(parser_, r.params_json);
    if (!caller) return session.send(protocol::encode_error(r.id, caller.error().code, caller.error().message));
    session.set_caller(*caller);  // from now on the session is that caller, nothing more
    if (sessions_of(session) >= static_cast<size_t>(config_.max_sessions_per_uid)) {
      session.send(protocol::encode_error(
          std::nullopt, "runner_full",
          fmt::format("caller {} has {} sessions open, the most one caller may have (max_sessions_per_uid); try again later",
                      *caller, config_.max_sessions_per_uid)));
      return session.close_after_flush();
    }
    return session.send(protocol::encode_result(r.id, fmt::format("{{\"caller\":\"{}\"}}", *caller)));
  }
  session.send(protocol::encode_error(r.id, "bad_request", fmt::format("unknown method \"{}\"", m.substr(0, 64))));
}

void Runner::refuse_unrecorded(const std::string& job_id, SessionId session_id, int64_t request_id, const Error& e) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  queue_.remove(job_id);
  pending_.erase(job_id);
  protocol::Outcome o;
  o.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
  o.reason = "runner_disk_full";
  metrics_.refused(o.reason);
  log_warning("job {}: refused, it could not be recorded: {}", job_id, e.message);
  job.finish_unstarted(o, "the runner could not record the job: " + e.message, kRetryWhenDiskFullMs);
  Session* session = find_session(session_id);
  if (session && !job.terminal_json().empty()) session->send(protocol::with_request_id(request_id, job.terminal_json()));
}

void Runner::refuse_job(Session& session, int64_t request_id, const std::string& reason, const std::string& detail,
                        std::optional<int64_t> retry_after_ms) {
  metrics_.refused(reason);
  protocol::TerminalRecord t;
  auto id = new_job_id();
  t.job_id = id ? *id : "";
  t.outcome.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
  t.outcome.reason = reason;
  t.ran = "none";
  t.refusal_detail = detail.substr(0, 1024);
  t.retry_after_ms = retry_after_ms;
  session.send(protocol::with_request_id(request_id, protocol::encode_terminal(t)));
}

size_t Runner::running_jobs() const {
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->state() == Job::State::kRunning;
  return n;
}

void Runner::handle_run(Session& session, const protocol::Request& r) {
  auto params = protocol::parse_run_params(parser_, r.params_json, static_cast<size_t>(config_.max_argument_bytes));
  if (!params) return session.send(protocol::encode_error(r.id, params.error().code, params.error().message));
  const auto& p = *params;
  if (p.direct && !config_.direct_jobs) {
    return session.send(protocol::encode_error(r.id, "bad_request",
                                               "direct jobs are not enabled on this runner (direct_jobs = false)"));
  }
  auto rel = workspace::relative_cwd(p.repository_root, p.cwd);
  if (!rel) return session.send(protocol::encode_error(r.id, rel.error().code, rel.error().message));
  const int64_t timeout_s = p.timeout_s.value_or(config_.default_timeout_s);
  if (timeout_s > config_.max_timeout_s) {
    return session.send(protocol::encode_error(
        r.id, "bad_request", fmt::format("timeout {} s is over this runner's maximum of {} s", timeout_s, config_.max_timeout_s)));
  }
  const int64_t memory = p.memory_bytes.value_or(config_.default_memory_bytes);
  if (memory > config_.max_memory_bytes || memory > memory_budget_) {
    return session.send(protocol::encode_error(
        r.id, "bad_request", fmt::format("memory {} bytes is over this runner's maximum of {} bytes", memory,
                                         std::min(config_.max_memory_bytes, memory_budget_))));
  }
  // weight_hint scales the default claim (within 1 .. the host's CPUs) when cpus is not given.
  int64_t cpus = p.cpus.value_or(config_.default_cpus);
  if (!p.cpus && p.weight_hint && *p.weight_hint > 0) {
    cpus = std::clamp<int64_t>(std::llround(static_cast<double>(config_.default_cpus) * *p.weight_hint), 1,
                               static_cast<int64_t>(cpu_claims_.cpu_count()));
  }
  if (cpus > static_cast<int64_t>(cpu_claims_.cpu_count())) {
    return session.send(protocol::encode_error(
        r.id, "bad_request", fmt::format("cpus {} is more than this host's {} CPUs", cpus, cpu_claims_.cpu_count())));
  }
  PriorityClass priority = PriorityClass::kBatch;
  if (p.priority == "interactive") priority = PriorityClass::kInteractive;
  else if (p.priority != "batch") return session.send(protocol::encode_error(r.id, "bad_request", "field \"params.priority\" must be \"interactive\" or \"batch\""));

  if (shutting_down_ || draining_) {
    return refuse_job(session, r.id, "runner_draining", "the runner is draining and takes no new jobs", kRetryWhenDrainingMs);
  }
  if (p.platform == "windows" && vm_host_ && vm_host_->unavailable()) {
    return refuse_job(session, r.id, "platform_unsupported", *vm_host_->unavailable());
  }
  if (p.platform != "linux" && p.platform != "windows") {
    return refuse_job(session, r.id, "platform_unsupported", "this runner does not run \"" + p.platform + "\" jobs");
  }
  if (p.network != "offline" && !outbound_) {
    return refuse_job(session, r.id, "network_unsupported",
                      "outbound network access is not enabled on this runner (outbound_network = false)");
  }
  if (auto s = workspace::validate_workspace_key(p.workspace_key); !s) {
    return refuse_job(session, r.id, "workspace_key_rejected", s.error().message);
  }
  if (p.untrusted) {  // (ext) only workspaces whose change passed the screen (docs/change-screen.md)
    std::vector<std::string> keys = p.siblings;
    keys.insert(keys.begin(), p.workspace_key);
    for (const auto& key : keys) {
      if (auto why = workspaces_->unscreened_reason(session.caller(), key); !why.empty()) {
        return refuse_job(session, r.id, "screen_refused", fmt::format("workspace \"{}\": {}", key, why));
      }
    }
  }
  if (const int64_t free_bytes = free_disk_bytes(); free_bytes >= 0 && free_bytes < config_.disk_free_floor_bytes) {
    return refuse_job(session, r.id, "runner_disk_full",
                      fmt::format("{} MiB free on the workspace filesystem, below the floor of {} MiB", free_bytes >> 20,
                                  config_.disk_free_floor_bytes >> 20),
                      kRetryWhenDiskFullMs);
  }
  if (auto room = state_room(); !room) {
    return refuse_job(session, r.id, "runner_disk_full", room.error().message, kRetryWhenDiskFullMs);
  }
  if (queue_.full()) {
    return refuse_job(session, r.id, "runner_full",
                      fmt::format("{} jobs are queued, the most this runner holds", queue_.size()), kRetryWhenFullMs);
  }

  auto id = new_job_id();
  if (!id) return session.send(protocol::encode_error(r.id, "internal", id.error().message));
  auto job = std::make_unique<Job>(*this, *id, session.caller(), p.workspace_key);
  if (auto s = job->enqueue(summarize(p)); !s) {
    return refuse_job(session, r.id, "workspace_setup_failed", s.error().message);
  }
  // A direct job's secret: 256 bits from the OS, sent once in `accepted` on this connection;
  // only its digest is kept (state.json), the plaintext is wiped once it is on its way.
  std::string secret;
  if (p.direct) {
    uint8_t raw[32];
    if (getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) {
      return session.send(protocol::encode_error(r.id, "internal", "getrandom failed"));
    }
    Sha256Digest bytes;
    std::copy(std::begin(raw), std::end(raw), bytes.begin());
    secret = to_hex(bytes);
    explicit_bzero(raw, sizeof raw);
    explicit_bzero(bytes.data(), bytes.size());
    job->set_secret_digest(sha256(secret));
  }
  jobs_[*id] = std::move(job);

  QueueEntry entry;
  entry.job_id = *id;
  entry.priority = priority;
  entry.cpus = cpus;
  entry.memory_bytes = memory;
  // A VM job also reserves what QEMU itself may use (its memory cgroup's hard limit).
  if (p.platform == "windows" && vm_host_) entry.memory_bytes += vm_host_->memory_overhead();
  entry.enqueued_ms = uv_now(loop_);
  const int64_t wait_limit_s = std::min(p.queue_wait_limit_s.value_or(config_.queue_wait_limit_s), config_.queue_wait_limit_s);
  entry.deadline_ms = entry.enqueued_ms + static_cast<uint64_t>(wait_limit_s) * 1000;
  const size_t position = queue_.push(entry);

  protocol::AcceptedRecord a;
  a.job_id = *id;
  a.queue_position = static_cast<int64_t>(position - 1);  // 0: next to start
  a.env_not_forwarded = filter_env(p.env, config_.env_allow).not_forwarded;
  a.platform = p.platform;
  a.network = p.network;
  if (p.direct) a.secret = std::move(secret);
  std::string accepted = protocol::encode_accepted(a);
  if (a.secret) explicit_bzero(a.secret->data(), a.secret->size());
  explicit_bzero(secret.data(), secret.size());
  pending_[*id] = PendingStart{std::move(*params), std::move(*rel), timeout_s, memory, cpus};  // `p` is gone now
  // `accepted` promises the job is on record: it goes out once state.json says so, and the job
  // starts no earlier. If that save fails (a full disk), the job is refused instead.
  session.owe_reply();
  awaiting_record_.insert(*id);
  auto accepted_shared = std::make_shared<std::string>(std::move(accepted));
  request_save(
      [this, sid = session.id(), request_id = r.id, accepted = accepted_shared, job_id = *id] {
        awaiting_record_.erase(job_id);
        if (Session* s = find_session(sid)) {
          s->reply_paid();
          s->send(protocol::with_request_id(request_id, *accepted), Session::kSensitive);
          if (auto it = jobs_.find(job_id); it != jobs_.end()) it->second->follow(*s, request_id, 1);
        }  // else the client left; the job runs on, attachable later
        explicit_bzero(accepted->data(), accepted->size());
        schedule_admission();
      },
      [this, sid = session.id(), request_id = r.id, accepted = accepted_shared, job_id = *id](const Error& e) {
        awaiting_record_.erase(job_id);
        explicit_bzero(accepted->data(), accepted->size());
        if (Session* s = find_session(sid)) s->reply_paid();
        refuse_unrecorded(job_id, sid, request_id, e);
      });
  schedule_admission();
  update_status();
}

int64_t Runner::free_disk_bytes() const {
  struct statvfs fs {};
  const std::string root = config_.effective_workspace_root();
  // The workspace root may not exist yet: its filesystem is then that of its parent.
  std::string path = root;
  while (statvfs(path.c_str(), &fs) != 0) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return -1;
    path.resize(slash);
  }
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

Status Runner::state_room() const {
  if (state_writer_.failing()) {
    return make_error("runner_disk_full", "the runner cannot save its state (see its log); new jobs are refused until it can");
  }
  struct statvfs state_fs {}, ws_fs {};
  if (statvfs(config_.state_dir.c_str(), &state_fs) != 0) return {};
  const int64_t free_bytes = static_cast<int64_t>(state_fs.f_bavail) * static_cast<int64_t>(state_fs.f_frsize);
  // A save writes the whole state beside the old one before the rename; the job's log and its
  // records need a little more.
  int64_t needed = 2 * static_cast<int64_t>(last_state_bytes_) + kStateSaveHeadroomBytes;
  // On the workspaces' filesystem the operator's floor is kept free besides.
  std::string ws = config_.effective_workspace_root();
  while (statvfs(ws.c_str(), &ws_fs) != 0 && ws.rfind('/') != std::string::npos && ws.rfind('/') > 0) ws.resize(ws.rfind('/'));
  if (ws_fs.f_fsid == state_fs.f_fsid) needed += config_.disk_free_floor_bytes;
  if (free_bytes >= needed) return {};
  return make_error("runner_disk_full", fmt::format("{} KiB free on the state directory's filesystem, below the {} KiB "
                                                    "that recording a job needs",
                                                    free_bytes >> 10, needed >> 10));
}

int64_t Runner::memory_reserved() const {
  int64_t sum = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->state() == Job::State::kRunning) sum += job->memory_bytes();
  }
  return sum;
}

bool Runner::fits(const QueueEntry& e) const {
  return running_jobs() < static_cast<size_t>(config_.max_running_jobs) &&
         memory_reserved() + e.memory_bytes <= memory_budget_ &&
         cpu_claims_.can_claim(e.cpus, config_.cpu_oversubscription);
}

// Starting a job costs milliseconds of system calls (cgroups, namespaces, clone): at most one job
// starts per loop iteration, so twenty arriving at once do not stall everyone else twenty times.
void Runner::schedule_admission() {
  if (!starter_.live()) {
    uv_idle_init(loop_, starter_.get());
    starter_.initialized(this);
    uv_timer_init(loop_, queue_timer_.get());
    queue_timer_.initialized(this);
  }
  if (queue_.empty()) {
    uv_idle_stop(starter_.get());
    uv_timer_stop(queue_timer_.get());
    return;
  }
  uv_idle_start(starter_.get(), [](uv_idle_t* h) {
    if (auto* self = reactor::owner_of<Runner>(h)) self->start_next();
  });
  // Queue-wait limits are checked a few times a second while anything waits.
  if (!uv_is_active(queue_timer_.handle())) {
    uv_timer_start(queue_timer_.get(), [](uv_timer_t* h) {
      if (auto* self = reactor::owner_of<Runner>(h)) self->expire_queue();
    }, 250, 250);
  }
}

void Runner::expire_queue() {
  for (const auto& e : queue_.expire(uv_now(loop_))) {
    pending_.erase(e.job_id);
    auto it = jobs_.find(e.job_id);
    if (it == jobs_.end()) continue;
    protocol::Outcome o;
    o.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
    o.reason = "queue_wait_exceeded";
    metrics_.refused("queue_wait_exceeded");
    it->second->finish_unstarted(o, "the job waited in the queue for its whole queue-wait limit");
  }
  if (queue_.empty()) uv_timer_stop(queue_timer_.get());
}

void Runner::start_next() {
  // A job whose workspace is busy (a prepare or the scan after a job of it runs) waits without
  // holding up other workspaces' jobs; otherwise FIFO: the first such job waits for room and
  // nothing jumps ahead of it.
  const QueueEntry* head = queue_.first_not([this](const QueueEntry& e) {
    auto j = jobs_.find(e.job_id);
    return j != jobs_.end() && workspaces_->busy(j->second->caller(), j->second->workspace_key());
  });
  if (!head || shutting_down_ || !fits(*head)) {
    uv_idle_stop(starter_.get());  // admission runs again when a job finishes or a workspace is idle
    return;
  }
  // The job's queued record must be durable before it runs (recovery then knows it was accepted).
  if (awaiting_record_.count(head->job_id)) {
    uv_idle_stop(starter_.get());  // admission runs again when the job is recorded
    return;
  }
  const QueueEntry entry = *queue_.take(head->job_id);
  if (queue_.empty()) uv_idle_stop(starter_.get());
  auto pending_it = pending_.find(entry.job_id);
  auto job_it = jobs_.find(entry.job_id);
  if (pending_it == pending_.end() || job_it == jobs_.end()) return;
  PendingStart pending = std::move(pending_it->second);
  pending_.erase(pending_it);
  Job& job = *job_it->second;
  const protocol::RunParams& p = pending.params;
  const std::string& rel = pending.rel_cwd;
  auto refuse = [&](const std::string& reason, const std::string& detail) {
    protocol::Outcome o;
    o.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
    o.reason = reason;
    metrics_.refused(reason);
    job.finish_unstarted(o, detail.substr(0, 1024));
  };
  reactor::SlowCall timed("starting a job");
  auto ws = workspace::ensure_workspace_dir(config_.effective_workspace_root(), job.caller(), p.workspace_key,
                                            job_account_.uid, job_account_.gid);
  if (!ws) return refuse("workspace_setup_failed", ws.error().message);
  // Resolved inside the workspace only: a symlink the job planted never makes the answer depend on
  // the host (test build only: "cwd-beneath" falls back to a plain stat as root).
  if (motor::control_weakened("cwd-beneath")) {
    struct stat st {};
    const std::string cwd = rel.empty() ? *ws : *ws + "/" + rel;
    if (stat(cwd.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) {
      return refuse("workspace_setup_failed", "the working directory \"" + rel + "\" does not exist in the workspace");
    }
  } else if (auto st = workspace::check_dir_beneath(*ws, rel); !st) {
    return refuse("workspace_setup_failed", st.error().message);
  }
  if (p.platform == "windows") {
    if (!start_vm_job(job, pending, *ws)) return refuse("workspace_setup_failed", "the VM job could not be started");
    return update_status();
  }
  const auto env = filter_env(p.env, config_.env_allow);
  // The sandbox: the workspace at /workspace, everything else of the host's toolchain read-only,
  // motor-init as PID 1 running the command. Planned by the job starter (job_starter.hpp) just
  // before its clone3; the child only makes the system calls.
  sandbox::SandboxConfig box;
  box.workspace = {*ws, kWorkspaceInJob};
  box.tmp_size_bytes = static_cast<uint64_t>(config_.job_tmp_bytes);
  box.uid = job_account_.uid;
  box.gid = job_account_.gid;
  box.user_name = job_account_.name;
  box.group_name = job_group_name_;
  box.init_path = init_path_;
  // Shared caches: read-only at their own paths. Sibling workspaces of the same caller:
  // read-only at /siblings/<key>.
  for (const auto& cache : config_.cache_paths) {
    (motor::control_weakened("readonly-caches") ? box.writable : box.read_only).push_back({cache, cache});
  }
  if (motor::control_weakened("empty-root")) {
    // Test build only: host paths the empty root keeps out, bound read-only as a leaky bind list would.
    for (const std::string path : {"/root", "/etc/shadow", config_.state_dir.c_str()}) box.read_only.push_back({path, path});
  }
  for (const auto& sibling : p.siblings) {
    if (auto s = workspace::validate_workspace_key(sibling); !s) return refuse("workspace_key_rejected", s.error().message);
    const std::string dir = config_.effective_workspace_root() + "/" + job.caller() + "/" + sibling;
    struct stat sst {};
    if (sibling == p.workspace_key || lstat(dir.c_str(), &sst) != 0 || !S_ISDIR(sst.st_mode)) {
      return refuse("workspace_setup_failed", "sibling workspace \"" + sibling + "\" does not exist (or is this job's own)");
    }
    box.read_only.push_back({dir, std::string(kSiblingsInJob) + "/" + sibling});
  }
  if (p.network == "outbound") {
    auto network = outbound_->claim(job.id());
    if (!network) return refuse(network.error().code == "runner_full" ? "runner_full" : "workspace_setup_failed", network.error().message);
    box.network = std::move(*network);
  }
  JobLaunch launch;
  launch.executable = sandbox::kSandboxInitPath;
  launch.argv = sandbox::init_argv(p.command ? std::vector<std::string>{"/bin/sh", "-c", *p.command} : p.argv);
  launch.env = job_env(kWorkspaceInJob, job_account_.name, env.forwarded);
  launch.cwd = rel.empty() ? std::string(kWorkspaceInJob) : std::string(kWorkspaceInJob) + "/" + rel;
  launch.summary = job.summary();
  launch.timeout_s = pending.timeout_s;
  launch.memory_bytes = pending.memory_bytes;
  launch.pids_max = config_.pids_max;
  launch.cpus = cpu_claims_.claim(pending.cpus);
  launch.network = p.network;
  launch.platform = p.platform;
  const std::string job_id = job.id();
  if (auto s = job.start(launch, *cgroups_, box); !s) {
    log_error("job {}: could not start: {}", job.id(), s.error().message);
    // Job::start recorded the claim first thing: job_finished frees it, exactly once.
    return refuse("workspace_setup_failed", s.error().message);
  }
  // A starter without its helper answers at once, and a refusal has ended the job already.
  if (auto it = jobs_.find(job_id); it != jobs_.end() && it->second->state() == Job::State::kRunning)
    metrics_.observe_queue_wait(static_cast<double>(it->second->queue_wait_ms()) / 1000.0);
  update_status();
}

Job* Runner::visible_job(Session& session, const protocol::JobRef& ref) {
  auto it = jobs_.find(ref.job_id);
  Job* job = it == jobs_.end() ? nullptr : it->second.get();
  // The route that submitted the job (its caller) and the operator need no secret.
  if (job && (session.privileged() || job->caller() == session.caller())) return job;
  if (!ref.secret) return nullptr;
  // The direct route: decided on the digest alone, before any of the job's files are touched.
  // An unknown id (or a job without a secret) is compared with a fixed dummy digest, so the
  // answer and its cost are those of a wrong secret.
  const Sha256Digest presented = sha256(*ref.secret);
  const bool direct = job && job->secret_digest();
  const bool match = digests_equal(presented, direct ? *job->secret_digest() : kDummyDigest);
  return match && direct ? job : nullptr;
}

static constexpr const char* kNoSuchJob = "no such job, or it is not yours";

void Runner::handle_cancel(Session& session, const protocol::Request& r) {
  auto ref = protocol::parse_job_ref(parser_, r.params_json, true);
  if (!ref) return session.send(protocol::encode_error(r.id, ref.error().code, ref.error().message));
  Job* job = visible_job(session, *ref);
  if (!job) return session.send(protocol::encode_error(r.id, "unauthorized", kNoSuchJob));
  if (job->state() == Job::State::kQueued) {
    queue_.remove(job->id());
    pending_.erase(job->id());
    protocol::Outcome o;
    o.kind = protocol::Outcome::Kind::kCancelled;
    job->finish_unstarted(o, std::nullopt);
  } else {
    job->cancel();
  }
  session.send(protocol::encode_result(r.id, fmt::format("{{\"job_id\":\"{}\"}}", job->id())));
}

void Runner::handle_attach(Session& session, const protocol::Request& r) {
  auto ref = protocol::parse_job_ref(parser_, r.params_json, true);
  if (!ref) return session.send(protocol::encode_error(r.id, ref.error().code, ref.error().message));
  Job* job = visible_job(session, *ref);
  if (!job) return session.send(protocol::encode_error(r.id, "unauthorized", kNoSuchJob));
  job->follow(session, r.id, ref->from_seq);
}

void Runner::handle_status(Session& session, const protocol::Request& r) {
  auto ref = protocol::parse_job_ref(parser_, r.params_json, false);
  if (!ref) return session.send(protocol::encode_error(r.id, ref.error().code, ref.error().message));
  JsonWriter w;
  if (!ref->job_id.empty()) {
    Job* job = visible_job(session, *ref);
    if (!job) return session.send(protocol::encode_error(r.id, "unauthorized", kNoSuchJob));
    w.begin_object().field("job_id", job->id()).field("workspace_key", job->workspace_key());
    w.field("state", state_name(*job));
    if (auto pos = queue_.position(job->id())) w.field("queue_position", static_cast<uint64_t>(*pos - 1));
    w.field("summary", job->summary()).field("created_at_ms", job->created_at_ms());
    if (job->terminal_json().empty()) w.field_null("terminal");
    else w.field_raw("terminal", job->terminal_json());
    w.end_object();
    return session.send(protocol::encode_result(r.id, w.str()));
  }
  w.begin_object().field("queue_depth", static_cast<uint64_t>(queue_.size()));
  w.key("running_jobs").begin_array();
  for (const auto& [id, job] : jobs_) {
    if (job->state() != Job::State::kRunning) continue;
    if (!session.privileged() && job->caller() != session.caller()) continue;
    w.begin_object().field("job_id", id).field("workspace_key", job->workspace_key()).field("weight", 1);
    w.field("cpus", job->cpus().list()).end_object();
  }
  w.end_array();
  w.field("server_reachable", true).key("repositories").begin_array().end_array().field_null("rustc_version");
  w.end_object();
  session.send(protocol::encode_result(r.id, w.str()));
}

void Runner::handle_list(Session& session, const protocol::Request& r) {
  // The newest jobs, at most kListLimit of them, so the reply always fits in one frame.
  std::vector<const Job*> visible;
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && visible.size() <= kListLimit; ++it) {
    if (session.privileged() || it->second->caller() == session.caller()) visible.push_back(it->second.get());
  }
  const bool truncated = visible.size() > kListLimit;
  if (truncated) visible.pop_back();
  std::reverse(visible.begin(), visible.end());
  JsonWriter w;
  w.begin_object().field("truncated", truncated).key("jobs").begin_array();
  for (const Job* job : visible) {
    const std::string& id = job->id();
    w.begin_object().field("job_id", id).field("caller", job->caller()).field("workspace_key", job->workspace_key());
    w.field("state", state_name(*job));
    w.field("summary", job->summary()).field("created_at_ms", job->created_at_ms());
    simdjson::dom::element outcome;
    if (!job->terminal_json().empty() &&
        !parser_.parse(job->terminal_json().data(), job->terminal_json().size())["outcome"].get(outcome)) {
      w.field_raw("outcome", simdjson::minify(outcome));
    } else {
      w.field_null("outcome");
    }
    w.end_object();
  }
  w.end_array().end_object();
  session.send(protocol::encode_result(r.id, w.str()));
}

void Runner::handle_runner_status(Session& session, const protocol::Request& r) {
  auto reset_stall = protocol::parse_flag(parser_, r.params_json, "reset_stall");
  if (!reset_stall) return session.send(protocol::encode_error(r.id, reset_stall.error().code, reset_stall.error().message));
  auto with_metrics = protocol::parse_flag(parser_, r.params_json, "metrics");
  if (!with_metrics) return session.send(protocol::encode_error(r.id, with_metrics.error().code, with_metrics.error().message));
  update_status();
  JsonWriter w;
  w.begin_object().field("version", kVersion).field("protocol", kProtocolVersion);
  w.field("uptime_s", static_cast<int64_t>((uv_hrtime() - started_hr_ns_) / 1000000000));
  w.field("cgroup_layout", cgroups_->layout()).field("job_account", job_account_.name);
  w.field("draining", draining_).field("shutting_down", shutting_down_);
  w.field("queue_depth", static_cast<uint64_t>(queue_.size()));
  w.key("running_jobs").begin_array();
  double claimed = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->state() != Job::State::kRunning) continue;
    claimed += static_cast<double>(job->cpus().cpus.size());
    w.begin_object().field("job_id", id).field("workspace_key", job->workspace_key()).field("weight", 1);
    w.field("cpus", job->cpus().list()).field("cpus_shared", job->cpus().overlapping);
    w.field("memory_bytes", job->memory_bytes()).end_object();
  }
  w.end_array();
  w.field("cpus_total", static_cast<uint64_t>(cpu_claims_.cpu_count())).field("cpus_claimed", claimed);
  w.field("cores", static_cast<uint64_t>(cpu_claims_.core_count()))
      .field("claimed_cores", static_cast<uint64_t>(cpu_claims_.claimed_cores()));
  w.field("memory_budget_bytes", memory_budget_).field("memory_claimed_bytes", memory_reserved());
  w.field("memory_free_bytes", memory_budget_ - memory_reserved());
  w.field("disk_free_bytes", free_disk_bytes()).field("disk_free_floor_bytes", config_.disk_free_floor_bytes);
  w.field("jobs_known", static_cast<uint64_t>(jobs_.size())).field("sessions", static_cast<uint64_t>(sessions_.size()));
  w.field("loop_worst_stall_us", stall_.worst_us());
  w.field("client_buffered_bytes", buffered_bytes_).field("client_buffered_peak_bytes", buffered_peak_bytes_);
  if (*with_metrics) {
    metrics_.set_loop_worst_stall_seconds(static_cast<double>(stall_.worst_us()) / 1e6);
    w.field("metrics", metrics_.exposition());
  }
  w.end_object();
  if (*reset_stall) {
    stall_.reset();
    buffered_peak_bytes_ = buffered_bytes_;
  }
  session.send(protocol::encode_result(r.id, w.str()));
}

PersistedState Runner::state_snapshot() {
  PersistedState st;
  st.draining = draining_;
  for (const auto& [id, job] : jobs_) {
    PersistedJob pj;
    if (job->state() == Job::State::kFinished && !job->persisted_cache().empty()) {
      pj.encoded = job->persisted_cache();
      st.jobs.push_back(std::move(pj));
      continue;
    }
    pj.job_id = id;
    pj.caller = job->caller();
    pj.workspace_key = job->workspace_key();
    pj.summary = job->summary();
    pj.state = state_name(*job);
    pj.cgroup = job->state() == Job::State::kRunning ? job->cgroup_name() : "";
    pj.created_at_ms = job->created_at_ms();
    pj.started_at_ms = job->started_at_ms();
    pj.terminal_json = job->terminal_json();
    if (job->secret_digest()) pj.secret_sha256 = to_hex(*job->secret_digest());
    if (job->state() == Job::State::kFinished) {
      job->persisted_cache() = encode_job(pj);
      pj.encoded = job->persisted_cache();
    }
    st.jobs.push_back(std::move(pj));
  }
  return st;
}

Status Runner::save_state() {
  reactor::SlowCall timed("saving state.json");
  std::string text = encode_state(state_snapshot());
  last_state_bytes_ = text.size();
  auto s = write_state_file(config_.state_dir, text);
  if (!s) log_error("saving state: {}", s.error().message);
  return s;
}

void Runner::request_save(std::function<void()> then, std::function<void(const Error&)> failed) {
  if (then || failed) after_save_.push_back(StateWriter::Waiter{std::move(then), std::move(failed)});
  if (!saver_.live()) {  // before the loop runs (start-up): save now
    auto s = save_state();
    auto waiters = std::move(after_save_);
    after_save_.clear();
    for (auto& w : waiters) {
      if (s && w.durable) w.durable();
      if (!s && w.failed) w.failed(s.error());
    }
    return;
  }
  if (save_pending_) return;
  save_pending_ = true;
  uv_check_start(saver_.get(), [](uv_check_t* h) {
    auto* self = reactor::owner_of<Runner>(h);
    if (!self) return;
    uv_check_stop(h);
    self->save_pending_ = false;
    auto waiters = std::move(self->after_save_);
    self->after_save_.clear();
    // Encoding stays on the loop (microseconds); the write and its fsyncs do not (without its
    // helper process the writer makes them here).
    reactor::SlowCall timed("encoding state.json");
    std::string text = encode_state(self->state_snapshot());
    self->last_state_bytes_ = text.size();
    self->state_writer_.write(std::move(text), std::move(waiters));
  });
}

void Runner::job_start_failed(Job& job, const std::string& detail) {
  protocol::Outcome o;
  o.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
  o.reason = "workspace_setup_failed";
  metrics_.refused(o.reason);
  job.finish_unstarted(o, detail.substr(0, 1024));  // job_finished frees its claim
}

void Runner::job_finished(Job& job) {
  cpu_claims_.release(job.cpus());
  if (outbound_) outbound_->release(job.id());
  simdjson::dom::element root;
  std::string_view outcome;
  if (!parser_.parse(job.terminal_json().data(), job.terminal_json().size()).get(root) &&
      !root.at_pointer("/outcome/type").get_string().get(outcome) && outcome != "refused_before_start") {
    metrics_.job_finished(outcome);  // refusals were counted by refused()
  }
  evict_finished();
  request_save();
  schedule_admission();
  update_status();
  answer_drain_waiters();
  if (shutting_down_) maybe_exit();
}

void Runner::remove_history(const std::string& job_id) {
  log_info("job {}: output history older than {} s deleted", job_id, config_.job_log_max_age_s);
  remove_job_dir(job_dir(job_id));
}

void Runner::expire_histories() {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& [id, job] : jobs_) {
    if (job->state() != Job::State::kFinished) continue;
    if (now - job->finished_at_ms() < config_.job_log_max_age_s * 1000) continue;
    struct stat st {};
    if (stat(job_dir(id).c_str(), &st) == 0) job->expire_history();
  }
}

void Runner::evict_finished() {
  size_t finished = 0;
  for (const auto& [id, job] : jobs_) finished += job->state() == Job::State::kFinished;
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > static_cast<size_t>(config_.finished_jobs_kept);) {
    if (it->second->state() == Job::State::kFinished && !it->second->has_followers()) {
      remove_job_dir(job_dir(it->first));
      it = jobs_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

void Runner::update_status() {
  notifier_.status(fmt::format("{} running, {} queued, {} sessions{}", running_jobs(), queue_.size(), sessions_.size(),
                               draining_ ? ", draining" : ""));
  metrics_.set_running(static_cast<int64_t>(running_jobs()));
  metrics_.set_queued(static_cast<int64_t>(queue_.size()));
  double claimed = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->state() == Job::State::kRunning) claimed += static_cast<double>(job->cpus().cpus.size());
  }
  metrics_.set_cpus_claimed(claimed);
  metrics_.set_memory_claimed_bytes(memory_reserved());
  metrics_.set_sessions(static_cast<int64_t>(sessions_.size()));
  metrics_.set_draining(draining_);
}

void Runner::write_metrics() {
  metrics_.set_loop_worst_stall_seconds(static_cast<double>(stall_.worst_us()) / 1e6);
  reactor::SlowCall timed("writing the metrics file");
  if (auto s = write_textfile(config_.metrics_file, metrics_.exposition()); !s) {
    log_warning("writing metrics to {}: {}", config_.metrics_file, s.error().message);
  }
}

void Runner::handle_drain(Session& session, const protocol::Request& r, bool drain) {
  auto wait = protocol::parse_flag(parser_, r.params_json, "wait");
  if (!wait) return session.send(protocol::encode_error(r.id, wait.error().code, wait.error().message));
  if (draining_ != drain) {
    draining_ = drain;
    log_info("{} by {}", drain ? "draining: new jobs are refused until resumed" : "resumed: taking new jobs",
             session.caller());
    update_status();
    if (!drain) schedule_admission();
  }
  // The reply promises the flag survives a restart: it goes out once state.json has it.
  session.owe_reply();
  request_save(
      [this, sid = session.id(), drain, wait = *wait, request_id = r.id] {
        Session* s = find_session(sid);
        if (!s) return;
        if (drain && wait && (running_jobs() > 0 || !queue_.empty())) {
          drain_waiters_.emplace_back(sid, request_id);  // answered once idle; the reply stays owed
          return;
        }
        s->reply_paid();
        s->send(protocol::encode_result(request_id, fmt::format(R"({{"draining":{},"running_jobs":{},"queue_depth":{}}})",
                                                                draining_, running_jobs(), queue_.size())));
      },
      [this, sid = session.id(), request_id = r.id](const Error& e) {
        Session* s = find_session(sid);
        if (!s) return;
        s->reply_paid();
        s->send(protocol::encode_error(request_id, "runner_disk_full",
                                       "the flag is set but could not be saved yet (it is retried): " + e.message));
      });
}

void Runner::answer_drain_waiters() {
  if (drain_waiters_.empty() || running_jobs() > 0 || !queue_.empty()) return;
  for (auto [sid, id] : std::exchange(drain_waiters_, {})) {
    Session* session = find_session(sid);
    if (!session) continue;
    session->reply_paid();
    session->send(protocol::encode_result(id, fmt::format(R"({{"draining":{},"running_jobs":0,"queue_depth":0}})", draining_)));
  }
}

void Runner::begin_shutdown(int signum) {
  if (shutting_down_) return;
  shutting_down_ = true;
  log_info("signal {}: shutting down ({} jobs running, policy: {})", signum, running_jobs(),
           config_.shutdown == ShutdownPolicy::kKill ? "kill" : "finish");
  notifier_.stopping();
  listener_.close();
  // Queued jobs never start now: they end as cancelled before start.
  while (!queue_.empty()) {
    const QueueEntry e = queue_.pop_head();
    pending_.erase(e.job_id);
    if (auto it = jobs_.find(e.job_id); it != jobs_.end()) {
      // Nobody cancelled it: the runner refuses it now, for the time being (submit it again).
      protocol::Outcome o;
      o.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
      o.reason = "runner_draining";
      it->second->finish_unstarted(o, "the runner shut down before the job started; submit it again", kRetryWhenDrainingMs);
    }
  }
  unlink(config_.socket_path.c_str());
  auto kill_all = [](Runner& self) {
    for (auto& [id, job] : self.jobs_) {
      if (job->state() == Job::State::kRunning) job->kill_for_shutdown();
    }
  };
  uv_timer_init(loop_, shutdown_timer_.get());
  shutdown_timer_.initialized(this);
  if (config_.shutdown == ShutdownPolicy::kKill) {
    kill_all(*this);
  } else {
    uv_timer_start(shutdown_timer_.get(), [](uv_timer_t* h) {
      auto* self = reactor::owner_of<Runner>(h);
      if (!self) return;
      log_info("shutdown grace period over; killing the jobs still running");
      for (auto& [id, job] : self->jobs_) {
        if (job->state() == Job::State::kRunning) job->kill_for_shutdown();
      }
    }, static_cast<uint64_t>(config_.shutdown_grace_s) * 1000, 0);
  }
  maybe_exit();
}

void Runner::maybe_exit() {
  if (running_jobs() > 0) return;
  // The last records (the terminal ones) go out before the sessions close.
  while (!fan_out_jobs_.empty()) fan_out_slice();
  state_writer_.stop();  // its last write lands first; then the final state, here
  (void)save_state();
  // Let clients receive their terminal records, then stop.
  std::vector<Session*> open;
  for (const auto& [sid, s] : sessions_) open.push_back(s);
  for (Session* s : open) s->close_after_flush();
  uv_timer_stop(shutdown_timer_.get());
  uv_timer_start(shutdown_timer_.get(), [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<Runner>(h)) uv_stop(self->loop_);
  }, kExitFlushMs, 0);
  if (sessions_.empty()) uv_stop(loop_);
}

}  // namespace motor::runner

namespace motor::runner {

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
  const std::vector<std::string> argv = p.command ? std::vector<std::string>{"/bin/sh", "-c", *p.command} : p.argv;
  std::vector<std::string> env;
  for (const auto& [name, value] : filter_env(p.env, config_.env_allow).forwarded) env.push_back(name + "=" + value);
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
  auto spec = vm_host_->job_spec(job.id(), job.caller(), p.workspace_key, workspace_dir, argv, env, launch.cpus,
                                 pending.memory_bytes, job_account_, std::move(prep_network));
  spec.cwd = pending.rel_cwd;  // validated as a Linux job's; it exists in the workspace (checked above)
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
