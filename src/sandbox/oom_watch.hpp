// Live OOM detection for one job cgroup, as an fd the runner's loop polls (DESIGN.md "One
// reactor": cgroup watchers). The count read at the job's exit (JobCgroup::oom_killed) stays
// the confirmation; this tells the runner while the job still runs.
//
//   v1: an eventfd registered through cgroup.event_control for memory.oom_control; the kernel
//       signals it when the cgroup hits its limit and the OOM killer runs (and also when the
//       cgroup is removed: stop polling before remove()).
//   v2: inotify IN_MODIFY on memory.events, which the kernel touches when a counter changes.
//
// Either way a wake-up is only a hint: consume() drains the fd and reads the `oom_kill` counter.
#pragma once

#include <cstdint>
#include <string>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::sandbox {

class OomWatch {
 public:
  // v1: `memory_dir` is the job's directory in the memory hierarchy.
  static Expected<OomWatch> on_v1_oom_control(const std::string& memory_dir);
  // v2: watches `dir`/`file` (memory.events) and reads `key` (oom_kill) from it.
  static Expected<OomWatch> on_v2_events_file(const std::string& dir, const std::string& file = "memory.events",
                                              const std::string& key = "oom_kill");

  // Readable when something happened; poll it (UV_READABLE).
  int fd() const { return fd_.get(); }
  // Drains the fd (non-blocking) and returns the counter now (OOM kills so far).
  Expected<int64_t> consume();

 private:
  OomWatch(UniqueFd fd, std::string counter_path, std::string key, bool inotify)
      : fd_(std::move(fd)), counter_path_(std::move(counter_path)), key_(std::move(key)), inotify_(inotify) {}
  UniqueFd fd_;
  std::string counter_path_;  // the file holding "<key> N"
  std::string key_;
  bool inotify_ = false;
};

}  // namespace motor::sandbox
