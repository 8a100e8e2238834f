#include "sandbox/cgroup_reaper.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <utility>

#include "base/log.hpp"
#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/cgroup.hpp"

namespace motor::sandbox {
namespace {

constexpr uint64_t kRetryMs = 200;
constexpr int kMaxAttempts = 300;  // a minute; after that the next start's recovery has it

bool gone(const std::string& dir) { return ::access(dir.c_str(), F_OK) != 0 && errno == ENOENT; }

void kill_listed(const std::string& dir) {
  const std::string kill_path = dir + "/cgroup.kill";
  if (::access(kill_path.c_str(), F_OK) == 0) {
    std::ofstream(kill_path) << "1";
    return;
  }
  std::ifstream procs(dir + "/cgroup.procs");
  for (long pid; procs >> pid;) {
    if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

}  // namespace

bool JobCgroup::release_here(CgroupRemains& remains, std::string& error) {
  if (!owned_) return true;
  owned_ = false;
  remains = remains_of(*this, name());
  bool present = false;
  for (const auto& d : remains.dirs) present = present || (!d.empty() && !gone(d));
  if (!present) return true;  // removed already
  // The layout's own kill first (v1 freezes, so nothing forks while it is killed).
  if (auto populated_now = populated(); !populated_now || *populated_now) (void)kill_all();
  return try_reap(remains, error);
}

void JobCgroup::release() {
  CgroupRemains remains;
  std::string error;
  if (!release_here(remains, error)) reap_or_leave(reaper_, std::move(remains));
}

void reap_or_leave(CgroupReaper* reaper, CgroupRemains remains) {
  if (reaper) return reaper->reap(std::move(remains));
  std::string error;
  if (!try_reap(remains, error)) {
    log_warning("{}: its cgroup is still busy ({}); the next start's recovery removes it", remains.what, error);
  }
}

CgroupRemains remains_of(const JobCgroup& cgroup, std::string what) {
  return CgroupRemains{cgroup.directories(), cgroup.events_path(), std::move(what)};
}

CgroupRemains remains_of_dirs(std::vector<std::string> dirs, std::string what) {
  CgroupRemains remains{std::move(dirs), {}, std::move(what)};
  for (const auto& d : remains.dirs) {
    if (!d.empty() && ::access((d + "/cgroup.events").c_str(), F_OK) == 0) remains.events_path = d + "/cgroup.events";
  }
  return remains;
}

bool try_reap(const CgroupRemains& remains, std::string& error) {
  bool all_gone = true;
  for (auto it = remains.dirs.rbegin(); it != remains.dirs.rend(); ++it) {
    if (it->empty()) continue;
    // The rmdir first: a job's cgroup is nearly always empty (or gone) by now, and then that
    // one call is all it costs the loop. Only one that still holds processes (EBUSY) is killed.
    if (::rmdir(it->c_str()) == 0 || errno == ENOENT) continue;
    kill_listed(*it);
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT) {
      error = *it + ": " + std::strerror(errno);
      all_gone = false;
    }
  }
  return all_gone;
}

Status reap_now(const CgroupRemains& remains, int wait_ms) {
  UniqueFd events(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (events && !remains.events_path.empty()) (void)inotify_add_watch(events.get(), remains.events_path.c_str(), IN_MODIFY);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  std::string error;
  while (!try_reap(remains, error)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return make_error("io", "removing the cgroup " + error);
    // Woken when "populated" changes; at most 10 ms apart (pure v1 has no events file, and
    // an rmdir can fail for a moment after the last process left).
    pollfd p{events.get(), POLLIN, 0};
    if (::poll(&p, events ? 1 : 0, static_cast<int>(std::min<int64_t>(left.count(), 10))) > 0) {
      char buf[4096];
      while (::read(events.get(), buf, sizeof buf) > 0) {
      }
    }
  }
  return {};
}

CgroupReaper::~CgroupReaper() { reap_all_now(); }

void CgroupReaper::reap_all_now() {
  // The loop has stopped: a process just killed takes a moment to leave its cgroup (the teardown
  // of its namespaces runs in its exit, first), so each gets a bounded wait rather than one try.
  for (auto& b : busy_) {
    if (auto s = reap_now(b->remains, kShutdownWaitMs); !s) {
      log_warning("{}: its cgroup could not be removed: {}", b->remains.what, s.error().message);
    }
  }
  busy_.clear();
  timer_.close();
}

void CgroupReaper::reap(CgroupRemains remains) {
  std::string error;
  if (remains.dirs.empty() || try_reap(remains, error)) return;
  log_warning("{}: its cgroup is still busy ({}); removing it in the background", remains.what, error);
  auto busy = std::make_unique<Busy>();
  busy->reaper = this;
  busy->remains = std::move(remains);
  busy->last_error = std::move(error);
  watch(*busy);
  busy_.push_back(std::move(busy));
  if (!timer_.live()) {
    if (auto s = reactor::uv_status(timer_.init(this, uv_timer_init, loop_), "the cgroup reaper's timer"); !s) {
      log_error("{}; busy cgroups are left to the next start", s.error().message);
      return;
    }
  }
  if (uv_is_active(timer_.handle())) return;
  const int rc = uv_timer_start(timer_.get(), [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<CgroupReaper>(h)) self->tick();
  }, kRetryMs, kRetryMs);
  if (auto s = reactor::uv_status(rc, "starting the cgroup reaper's timer"); !s) log_error("{}", s.error().message);
}

void CgroupReaper::watch(Busy& busy) {
  if (busy.remains.events_path.empty()) return;
  if (busy.events.init(&busy, uv_fs_event_init, loop_) != 0) return;  // the timer still retries
  const int rc = uv_fs_event_start(busy.events.get(), [](uv_fs_event_t* h, const char*, int, int) {
    if (auto* b = reactor::owner_of<Busy>(h)) b->reaper->attempt(*b);
  }, busy.remains.events_path.c_str(), 0);
  if (rc != 0) busy.events.close();
}

void CgroupReaper::attempt(Busy& busy) {
  if (!try_reap(busy.remains, busy.last_error)) return;
  log_info("{}: its cgroup is removed (after {} background attempts)", busy.remains.what, busy.attempts + 1);
  busy_.remove_if([&](const std::unique_ptr<Busy>& b) { return b.get() == &busy; });
  if (busy_.empty() && timer_.live()) uv_timer_stop(timer_.get());
}

void CgroupReaper::tick() {
  for (auto it = busy_.begin(); it != busy_.end();) {
    Busy& b = **it;
    if (try_reap(b.remains, b.last_error)) {
      log_info("{}: its cgroup is removed (after {} background attempts)", b.remains.what, b.attempts + 1);
      it = busy_.erase(it);
    } else if (++b.attempts >= kMaxAttempts) {
      log_warning("{}: giving up on removing its cgroup {}: {}", b.remains.what, b.remains.dirs.front(), b.last_error);
      it = busy_.erase(it);
    } else {
      ++it;
    }
  }
  if (busy_.empty()) uv_timer_stop(timer_.get());
}

}  // namespace motor::sandbox
