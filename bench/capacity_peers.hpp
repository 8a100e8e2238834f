// The systems the capacity bench drives: motor through its socket, and the peers (bwrap, podman)
// as processes whose stdout+stderr is one pipe (capacity_peers.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "capacity_job.hpp"

namespace motor::bench::capacity {

// One `exec.run` on a fresh connection to the runner's socket, as `motor run` would.
JobResult motor_job(const std::string& socket, size_t kind, int id, Clock::time_point deadline,
                    std::atomic<int>& running);

struct Spawn {
  std::vector<std::string> argv;
  int cgroup_procs_fd = -1;  // if set, the child moves itself into that cgroup before exec
};
JobResult spawn_job(const Spawn& s, size_t kind, Clock::time_point deadline, std::atomic<int>& running);

// The bwrap line issue 6 names, with the merged-/usr links as on this host.
std::vector<std::string> bwrap_argv(const std::string& command);

// Memory cgroups for the bwrap peer's capped jobs: bwrap has no cap of its own, so the bench
// does what a wrapper around it would (one cgroup per job, the cap, the job in it, removal).
class PeerCgroups {
 public:
  PeerCgroups();
  ~PeerCgroups();
  bool usable() const { return !parent_.empty(); }
  const std::string& why_not() const { return why_not_; }
  std::string layout() const { return usable() ? (v1_ ? "cgroup v1 memory" : "cgroup2 memory") : "none"; }

  // A fresh capped cgroup: its path and an open fd on its procs file (or "" / -1).
  std::pair<std::string, int> make(int64_t bytes);
  static void remove(const std::string& cg);

 private:
  std::string parent_, why_not_;
  bool v1_ = false;
  std::atomic<int> next_{0};
};

JobResult bwrap_job(PeerCgroups& cgroups, size_t kind, Clock::time_point deadline, std::atomic<int>& running);

// podman with no image: a skeleton root (merged-/usr links, /etc/passwd and /etc/group for
// root, mount points), the host's /usr bound read-only, `--rootfs`.
class PodmanRoot {
 public:
  PodmanRoot();
  ~PodmanRoot();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

std::vector<std::string> podman_argv(const std::string& rootfs, size_t kind);

// Runs argv to its end; false with the exit code and the last line of its output in *why.
bool run_ok(const std::vector<std::string>& argv, std::string* why);

}  // namespace motor::bench::capacity
