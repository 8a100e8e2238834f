// Cgroup directories that could not be removed when their job ended (a dying process can keep a
// cgroup busy for longer than the brief in-place retries, e.g. on a host under heavy load): the
// runner keeps trying from a timer, killing anything still listed, until they are gone. Nothing of
// a job outlives it, not even an empty directory.
#pragma once

#include <uv.h>

#include <cstddef>
#include <string>
#include <vector>

#include "reactor/uv_handle.hpp"

namespace motor::runner {

class CgroupRetirement {
 public:
  explicit CgroupRetirement(uv_loop_t* loop) : loop_(loop) {}
  ~CgroupRetirement();
  CgroupRetirement(const CgroupRetirement&) = delete;
  CgroupRetirement& operator=(const CgroupRetirement&) = delete;

  // Takes over `dirs` (one cgroup, in any number of hierarchies; removed last to first).
  void retire(std::vector<std::string> dirs, std::string what);
  size_t pending() const { return entries_.size(); }
  // Shutdown: one last attempt each; what is left is logged (the next start cleans the parent).
  void remove_now();

 private:
  struct Entry {
    std::vector<std::string> dirs;
    std::string what;
    int attempts = 0;
    std::string last_error;
  };
  // One attempt: SIGKILL what each directory still lists, rmdir them; true when all are gone.
  static bool try_remove(Entry& e);
  void tick();

  uv_loop_t* loop_;
  std::vector<Entry> entries_;
  reactor::UvHandle<uv_timer_t> timer_;
};

}  // namespace motor::runner
