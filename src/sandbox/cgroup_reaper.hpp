// The one way a cgroup goes away (issue 16): kill every process in it, wait until it is
// unpopulated, remove its directories. A JobCgroup does this by itself when it is destroyed
// (cgroup.hpp: RAII), handing what is still busy to the runner's CgroupReaper, which waits on the
// loop (its cgroup.events watched, a timer where there is none and as a retry) and never sleeps.
// Off any loop (start-up recovery, the gate's clean-up) reap_now waits by poll(2) on inotify.
//
// Nothing of a job outlives it, not even an empty directory: a cgroup that still cannot be
// removed after a minute is logged and left to the next start's recovery, which removes every
// cgroup below the runner's parent that no running job names.
#pragma once

#include <uv.h>

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::sandbox {

class CgroupReaper;
class JobCgroup;

// What is left of one cgroup: its directory in each hierarchy (removed last to first) and its
// cgroup.events (empty on pure v1).
struct CgroupRemains {
  std::vector<std::string> dirs;
  std::string events_path;
  std::string what;  // for the log: "job 0123...", "a workspace helper"
};

CgroupRemains remains_of(const JobCgroup& cgroup, std::string what);
// From directories alone (a workspace helper's, a VM's pids cgroup): cgroup.events of the last
// one that has it.
CgroupRemains remains_of_dirs(std::vector<std::string> dirs, std::string what);

// One attempt, never waiting: kills what each directory still lists (cgroup.kill where it has
// one, else SIGKILL to every pid in cgroup.procs) and removes the directories. True when every
// one is gone; else `error` says why.
bool try_reap(const CgroupRemains& remains, std::string& error);

// Off the loop only: attempts until every directory is gone, waiting between them for
// cgroup.events to change (or 10 ms on pure v1), for at most `wait_ms`.
Status reap_now(const CgroupRemains& remains, int wait_ms);

// Through `reaper` when there is one; else one attempt now, and what is left is logged for the
// next start's recovery.
void reap_or_leave(CgroupReaper* reaper, CgroupRemains remains);

class CgroupReaper {
 public:
  explicit CgroupReaper(uv_loop_t* loop) : loop_(loop) {}
  // reap_all_now() (the runner's shutdown).
  ~CgroupReaper();
  CgroupReaper(const CgroupReaper&) = delete;
  CgroupReaper& operator=(const CgroupReaper&) = delete;

  // Tries once at once; a cgroup still busy is watched and retried on the loop.
  void reap(CgroupRemains remains);
  size_t pending() const { return busy_.size(); }
  // Shutdown, off the loop: each busy cgroup killed and waited for (kShutdownWaitMs at most
  // each); what is left is logged and dropped (the next start's recovery removes it).
  void reap_all_now();
  static constexpr int kShutdownWaitMs = 2000;

 private:
  struct Busy {
    CgroupReaper* reaper = nullptr;
    CgroupRemains remains;
    int attempts = 0;
    std::string last_error;
    reactor::UvHandle<uv_fs_event_t> events;  // cgroup.events changed: try again at once
  };
  void watch(Busy& busy);
  void attempt(Busy& busy);  // may erase `busy`
  void tick();

  uv_loop_t* loop_;
  std::list<std::unique_ptr<Busy>> busy_;
  reactor::UvHandle<uv_timer_t> timer_;  // the retry for every busy cgroup (and pure v1's only wake-up)
};

}  // namespace motor::sandbox
