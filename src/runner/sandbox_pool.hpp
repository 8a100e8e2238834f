// Sandboxes built ahead of their jobs: most of a Linux job's start is building its sandbox
// (namespaces, the mount table, pivot_root, capabilities, seccomp, motor-init's exec: about
// 4-6 ms of a 10 ms start on a 2-core VM, bench/README.md). The pool keeps `sandbox_pool_size`
// of them waiting, each built exactly as a default job's (runner/job_sandbox_policy.hpp) but with
// an empty mount point for its workspace (SandboxConfig::workspace_later), in a cgroup of the
// pool's, motor-init at its command gate (--await-command). A job whose sandbox would be the same
// but for its workspace (and a host /tmp) takes one: its cgroup adopts motor-init, the job
// starter's helper mounts the job's workspace there (sandbox/late_binds.hpp), and the command goes
// through the gate once the job is on record (LinuxExecution). Every sandbox serves one job and
// goes with it; nothing of a job is ever in a sandbox another job gets. Any other job (outbound,
// sibling workspaces, a fill, a command too large for the gate's pipe) builds its own, as
// without a pool.
//
// The pool is refilled as each job ends (Runner::job_finished), not as one takes a sandbox: on two
// cores a build beside the command that had just taken one slowed that command by more than the
// build saved. Before it hands any sandbox out, one late bind with no mounts proves the helper can
// enter a sandbox's mount namespace (setns wants CAP_SYS_CHROOT); if it cannot, or builds keep
// failing, the pool stops and says why in the log.
//
// What differs from a sandbox built for its job (docs/job-isolation.md, "Sandboxes built ahead"):
// its cgroup namespace was made in the pool's cgroup, so /proc/self/cgroup reads "/../job-ID"
// where a job's own reads "/"; the few pages its set-up used stay charged to the pool's cgroup.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "runner/job_execution.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/job_starter.hpp"
#include "sandbox/late_binds.hpp"
#include "sandbox/sandboxed_child.hpp"

namespace motor::runner {

// A sandbox built ahead, handed to one job.
struct PooledSandbox {
  // motor-init, waiting for its command; or still being built (no pid yet: its `spawned` follows)
  std::unique_ptr<sandbox::SandboxedChild> child;
  UniqueFd out_read, err_read;                     // its stdout and stderr
  UniqueFd gate;                                   // its fd 0: the command message (non-blocking)
  std::vector<sandbox::LateBind> binds;            // what the job needs mounted before it runs
  std::string command_message;                     // for the gate once the job is on record
};

class SandboxPool {
 public:
  struct Settings {
    size_t size = 0;               // sandboxes kept waiting; 0: none
    sandbox::SandboxConfig box;    // what each is built from (workspace_later)
    sandbox::SpawnSpec spec;       // motor-init --await-command, as the job account; no fds, no cgroup
  };
  SandboxPool(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, sandbox::JobStarter& starter);
  ~SandboxPool();
  SandboxPool(const SandboxPool&) = delete;
  SandboxPool& operator=(const SandboxPool&) = delete;

  // Drops what waits and starts over with `settings` (the runner's start and each reload).
  Status configure(Settings settings);
  // A waiting sandbox that becomes `box` (the job's) through late binds, with `command` (motor-init's
  // arguments, the command's environment and directory) as its command message: a ready one, else
  // one still being built (the starter answers in order: it is ready before a sandbox the job
  // asked for now would be). Null when there is none, the job's sandbox is another, or the message
  // does not fit the gate's pipe.
  std::unique_ptr<PooledSandbox> take(const sandbox::SandboxConfig& box, const JobCommand& command);
  // Builds sandboxes until `size` wait or are being built.
  void refill();
  // Drops every waiting sandbox and the pool's cgroup (the runner's shutdown).
  void clear();
  // No sandbox is handed out any more (a late bind failed): each job builds its own.
  void stop(const std::string& why);
  size_t ready() const;  // built, waiting and takeable by a job (0 before the proof)
  uint64_t taken() const { return taken_; }  // sandboxes handed to jobs since the start

 private:
  struct Entry {
    std::unique_ptr<sandbox::SandboxedChild> child;
    UniqueFd out_read, err_read, gate;
    size_t gate_capacity = 0;  // F_GETPIPE_SZ: the largest command message that never blocks
    bool ready = false;        // motor-init exec'd and waits
  };
  void build_one();
  void on_ready(uint64_t id);
  void on_gone(uint64_t id, const std::string& why);
  void prove(uint64_t id);

  uv_loop_t* loop_;
  sandbox::CgroupDriver& cgroups_;
  sandbox::JobStarter& starter_;
  Settings settings_;
  std::unique_ptr<sandbox::JobCgroup> cgroup_;  // where waiting sandboxes live until a job adopts one
  std::map<uint64_t, Entry> entries_;
  uint64_t next_id_ = 0;
  bool stopped_ = false;
  enum class Proof { kNone, kAsked, kProven } proof_ = Proof::kNone;
  int failures_in_a_row_ = 0;
  uint64_t taken_ = 0;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

}  // namespace motor::runner
