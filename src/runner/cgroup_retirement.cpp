#include "runner/cgroup_retirement.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "base/log.hpp"

namespace motor::runner {
namespace {

constexpr uint64_t kPeriodMs = 200;
constexpr int kMaxAttempts = 300;  // a minute; after that the next start's cleanup has it

}  // namespace

CgroupRetirement::~CgroupRetirement() { remove_now(); }

void CgroupRetirement::remove_now() {
  for (auto& e : entries_) {
    if (!try_remove(e)) log_warning("{}: its cgroup {} could not be removed: {}", e.what, e.dirs.front(), e.last_error);
  }
  entries_.clear();
}

void CgroupRetirement::retire(std::vector<std::string> dirs, std::string what) {
  if (dirs.empty()) return;
  log_warning("{}: its cgroup is still busy; removing it in the background", what);
  entries_.push_back(Entry{std::move(dirs), std::move(what), 0, {}});
  if (!timer_.live()) {
    uv_timer_init(loop_, timer_.get());
    timer_.initialized(this);
  }
  if (uv_is_active(timer_.handle())) return;
  uv_timer_start(timer_.get(), [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<CgroupRetirement>(h)) self->tick();
  }, kPeriodMs, kPeriodMs);
}

bool CgroupRetirement::try_remove(Entry& e) {
  bool all_gone = true;
  for (auto it = e.dirs.rbegin(); it != e.dirs.rend(); ++it) {
    std::ifstream procs(*it + "/cgroup.procs");
    for (long pid; procs >> pid;) {
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT) {
      e.last_error = std::strerror(errno);
      all_gone = false;
    }
  }
  return all_gone;
}

void CgroupRetirement::tick() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (try_remove(*it)) {
      log_info("{}: its cgroup is removed (after {} background attempts)", it->what, it->attempts + 1);
      it = entries_.erase(it);
    } else if (++it->attempts >= kMaxAttempts) {
      log_warning("{}: giving up on removing its cgroup {}: {}", it->what, it->dirs.front(), it->last_error);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (entries_.empty()) uv_timer_stop(timer_.get());
}

}  // namespace motor::runner
