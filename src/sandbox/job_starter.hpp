// Starts jobs from a small helper process, forked when the runner starts (before any session
// or job exists, like the state writer).
//
// Why: clone3 from the runner copies the runner's page tables, and until the child execs every
// page the loop then writes (malloc, JSON, logs) is copied on write. On this paravirtualised
// host page faults are dear: measured, the runner spent about 9 ms of CPU per job in such
// faults. The helper's memory is small and quiet, so its clones are cheap; it also plans the
// sandbox and keeps a pool of fresh network namespaces (sandbox/netns_pool.hpp).
//
// The helper clones with CLONE_PARENT: the job is the runner's child, and the runner waits on
// its pidfd exactly as before. The runner creates the job's pipes and passes their fds
// (SCM_RIGHTS), and for an outbound job the fd of its egress network namespace (the veth's far
// end is made there); the job's cgroup is either made by the helper (SpawnSpec::make_cgroup: its
// mkdirs and limit files, 0.2-0.45 ms, then cost the runner's loop nothing) or made by the runner
// and passed as fds. The helper answers with the pid, the pidfd and the setup-status pipe
// (and a sandbox built ahead's mount namespace).
// Without the helper (it failed to start or died) the runner spawns in process: the same
// sandbox, only slower.
#pragma once

#include <sys/types.h>

#include <uv.h>

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/uv_handle.hpp"
#include "sandbox/starter.hpp"

namespace motor::sandbox {

class JobStarter final : public Starter {
 public:
  JobStarter() = default;
  ~JobStarter();
  JobStarter(const JobStarter&) = delete;
  JobStarter& operator=(const JobStarter&) = delete;

  // Forks the helper with a pool of `netns_pool_size` network namespaces (0: none); its
  // answers are read on `loop`. With `cgroups` (which must outlive this), a spawn may ask for its
  // cgroup to be made (SpawnSpec::make_cgroup): the helper makes it with its copy of the driver
  // (the runner without its helper: here, on the loop).
  Status start(uv_loop_t* loop, size_t netns_pool_size, CgroupDriver* cgroups = nullptr);
  bool makes_cgroups() const override { return cgroups_ != nullptr; }
  bool running() const { return pid_ > 0; }
  // Requests sent and not answered yet (a burst of starts).
  bool busy() const { return !waiting_.empty(); }

  // Plans `box` and spawns `spec` in it (spec.hooks is ignored: the plan's hooks are used).
  // The loop only sends the request (the fds in it may be closed once this returns); `done`
  // runs on the loop when the helper answers, once the job has exec'd or failed to set up.
  // Without the helper, in process and at once. Errors name the failed step.
  void spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) override;
  // The helper writes the pid into the cgroup's cgroup.procs files (their fds passed, or the
  // cgroup made there first: `make_cgroup`) and setns()es into the sandbox's mount namespace and
  // back (late_binds.hpp). Without the helper it fails at once.
  void adopt_sandbox(pid_t pid, int mount_ns, const JobCgroup* cgroup, const CgroupRequest* make_cgroup,
                     const std::vector<LateBind>& binds, std::function<void(Status)> done) override;

  // Ends the helper (its pooled namespaces go with it). Waiting requests are dropped.
  void stop();

 private:
  // One answer: its word (ok or error), body and fds; an error of our own has word kReplyError.
  using Answer = std::function<void(uint32_t word, std::string body, std::vector<UniqueFd> fds)>;
  Status send_request(const SandboxConfig& box, const SpawnSpec& spec);
  void on_reply();
  void fail_all(const std::string& why);
  pid_t pid_ = -1;
  CgroupDriver* cgroups_ = nullptr;
  UniqueFd sock_;
  reactor::UvHandle<uv_poll_t> poll_;
  std::deque<Answer> waiting_;  // answers come in request order
};

}  // namespace motor::sandbox
