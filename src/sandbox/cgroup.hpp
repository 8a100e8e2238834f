// One job's cgroup, behind one interface for cgroup v2, v1 and this machine's hybrid layout.
// The driver is detected once at start and says which layout it found.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/oom_watch.hpp"

namespace motor::sandbox {

class CgroupReaper;
struct CgroupRemains;

struct CgroupLimits {
  int64_t memory_bytes = 0;  // 0 = no limit
  int64_t pids_max = 0;      // 0 = no limit
  std::string cpus;          // cpuset list ("0-1"); empty = inherit parent
};

// Owns the cgroup it names (RAII): destroying a JobCgroup kills what is left in it and removes
// it, at once when it is empty, else through the driver's CgroupReaper (cgroup_reaper.hpp) on the
// loop; without a reaper what is still busy is logged and left to the next start's recovery.
class JobCgroup {
 public:
  virtual ~JobCgroup() = default;
  // Identity that survives a runner restart (stored in state.json): the job cgroup's name.
  virtual const std::string& name() const = 0;

  // A directory fd for clone3(CLONE_INTO_CGROUP), or -1 where the layout has none (pure v1).
  virtual int clone_into_fd() const = 0;
  // Fds the child writes "0" into before exec (v1 cgroup.procs of each controller hierarchy).
  // Opened by the parent so the child does only write(2).
  virtual const std::vector<int>& child_attach_fds() const = 0;
  // Moves the running process `pid` into this cgroup in every hierarchy used, through the fds the
  // two above give (a sandbox built ahead of its job waits in the pool's cgroup until then; the
  // job starter's helper moves it, off the loop). Memory it was charged for stays behind.
  Status adopt(pid_t pid);

  // A path whose modification signals a change of "populated" (cgroup.events on v2; empty on
  // pure v1, where the caller polls populated()).
  virtual std::string events_path() const = 0;
  virtual Expected<bool> populated() const = 0;

  // Kills every process in the cgroup, including ones that left the session or ignore SIGTERM:
  // cgroup.kill on v2; on v1 freeze, SIGKILL every pid, thaw. Returns once the kill is issued;
  // callers confirm with populated() (or events_path()).
  virtual Status kill_all() = 0;
  // True if the memory controller reports an OOM kill in this cgroup.
  virtual bool oom_killed() const = 0;
  // A live watcher of OOM kills (oom_watch.hpp): v1 eventfd on memory.oom_control, v2 inotify
  // on memory.events. Close it before remove() (v1 signals it when the cgroup goes).
  virtual Expected<OomWatch> watch_oom() = 0;
  // Removes the cgroup directories now; fails (EBUSY) if processes remain (the destructor then
  // still reaps it).
  virtual Status remove() = 0;
  // The job's directory in each hierarchy used (v1 controllers, then the unified one), for
  // logs and for tests that check the limit files.
  virtual std::vector<std::string> directories() const = 0;

  // Gives up ownership: the destructor leaves the cgroup as it is. For a handle that only passes
  // the directories on (a workspace helper's cgroup, handed back to the reaper by its directories)
  // and for tests that play a runner which died.
  std::vector<std::string> disown() {
    owned_ = false;
    return directories();
  }

  // What the destructor does, without the reaper, and callable off the loop (libuv's pool): the
  // layout's kill if the cgroup still holds processes, then one attempt at removing it. The
  // cgroup is disowned either way. False: `remains` (its directories) are still there, `error`
  // says why; hand them to reap_or_leave on the loop.
  bool release_here(CgroupRemains& remains, std::string& error);
  CgroupReaper* reaper() const { return reaper_; }

 protected:
  // The concrete cgroups' destructors call this (the virtual functions still reach them there).
  void release();

 private:
  friend class CgroupDriver;
  CgroupReaper* reaper_ = nullptr;
  bool owned_ = true;
};

class CgroupDriver {
 public:
  virtual ~CgroupDriver() = default;
  // Cgroups made or opened from now on end through `reaper` (which must outlive them) when
  // they are destroyed still busy.
  void set_reaper(CgroupReaper* reaper) { reaper_ = reaper; }
  CgroupReaper* reaper() const { return reaper_; }
  // "v2", "v1" or "hybrid" (v1 controllers, v2 for kill/events), for logs and status.
  virtual std::string layout() const = 0;
  // Creates <parent>/<name> in every hierarchy used, with limits applied.
  virtual Expected<std::unique_ptr<JobCgroup>> create(const std::string& name, const CgroupLimits& limits) = 0;
  // Opens an existing job cgroup (after a runner restart) to kill and remove it.
  virtual Expected<std::unique_ptr<JobCgroup>> open(const std::string& name) = 0;
  // The handle of a job cgroup this layout made moments ago in another process (the job starter
  // made it and spawned into it), built from its name alone: no syscall on the loop, nothing
  // looked up. It cannot be spawned into (no clone-into or attach fds): it watches, kills, reads
  // and removes, as one from open() does.
  virtual Expected<std::unique_ptr<JobCgroup>> known(const std::string& name) { return open(name); }
  // Names of job cgroups that exist under our parent (for clean-up on start).
  virtual std::vector<std::string> list() const = 0;
  // Removes our parent cgroup from every hierarchy (the runner's clean shutdown). Fails, and
  // leaves it, while a cgroup is still under it (rmdir says EBUSY): nothing is killed here.
  virtual Status remove_parent() = 0;

 protected:
  // Every JobCgroup a driver hands out passes through here.
  std::unique_ptr<JobCgroup> owned(std::unique_ptr<JobCgroup> cgroup) const {
    cgroup->reaper_ = reaper_;
    return cgroup;
  }

 private:
  CgroupReaper* reaper_ = nullptr;
};

enum class CgroupPreference { kAuto, kV2, kV1 };

// Detects the host's layout (/proc/self/mountinfo) and creates our parent cgroup `parent`
// (e.g. "motor") in each hierarchy used. Never touches cgroups it did not create.
Expected<std::unique_ptr<CgroupDriver>> detect_cgroups(const std::string& parent,
                                                       CgroupPreference preference = CgroupPreference::kAuto,
                                                       const std::string& root = "/sys/fs/cgroup");

}  // namespace motor::sandbox
