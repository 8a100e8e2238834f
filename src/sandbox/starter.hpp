// What starts a sandboxed child: plans a SandboxConfig and spawns a SpawnSpec in it. Two kinds:
// the job starter (job_starter.hpp, a small helper process of the runner, whose clones are
// cheap) and the in-process one (a process with no helper: a test, motor-workspace-sandbox, a
// runner whose helper failed). SandboxedChild (sandboxed_child.hpp) takes either.
#pragma once

#include <functional>
#include <optional>

#include "motor/expected.hpp"
#include "sandbox/late_binds.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "sandbox/spawn.hpp"

namespace motor::sandbox {

class Starter {
 public:
  virtual ~Starter() = default;
  using Done = std::function<void(Expected<SpawnedProcess>)>;
  // Plans `box` and spawns `spec` in it (spec.hooks is ignored: the plan's hooks are used; the
  // uid and gid are the box's). The fds in `spec` may be closed once this returns. `done` runs
  // once: on the loop when a helper answers, or before this returns. Errors name the failed step.
  virtual void spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) = 0;
  // It honours SpawnSpec::make_cgroup (the job starter given the runner's CgroupDriver).
  virtual bool makes_cgroups() const { return false; }
  // Makes a sandbox built ahead a job's: moves its motor-init (`pid`) into `cgroup`, or into one
  // the starter makes first (`make_cgroup`, where makes_cgroups(): the caller then takes it by
  // name, CgroupDriver::known once `done` says ok, CgroupDriver::open if it failed; both null: it
  // stays where it is) and attaches `binds` (late_binds.hpp) inside its mount namespace
  // `mount_ns` (SpawnedProcess::mount_ns). `done` runs once, on the loop or before this returns.
  // Off the loop: a cgroup.procs write waits for the cgroup core's lock (an RCU grace period
  // when it is contended), and setns needs a single-threaded process. The base class fails at once.
  virtual void adopt_sandbox(pid_t pid, int mount_ns, const JobCgroup* cgroup, const CgroupRequest* make_cgroup,
                             const std::vector<LateBind>& binds, std::function<void(Status)> done);
};

// Plans, builds the hooks and spawns in this process. Plan and hooks live as long as this
// object: the job starter keeps them until the child has exec'd, since freeing them earlier
// would copy the pages a CLONE_VM child still shares.
struct SandboxedSpawn {
  std::optional<SandboxPlan> plan;
  ChildHooks hooks;
  // `prepared_net_fd` >= 0: a network namespace made ahead (netns_pool.hpp) instead of CLONE_NEWNET.
  Expected<SpawnedProcess> run(const SandboxConfig& box, SpawnSpec spec, int prepared_net_fd = -1);
};

class InProcessStarter final : public Starter {
 public:
  void spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) override;
};

// The cgroup a spawn goes into, given by its fds alone (what spawn_job uses): the job starter's
// view of the cgroup the runner passed it, and, with neither fd, "the caller's own cgroup"
// (motor-workspace-sandbox has moved itself into its helper cgroup before it spawns).
class PassedCgroup final : public JobCgroup {
 public:
  PassedCgroup(int clone_into = -1, std::vector<int> attach = {}) : clone_into_(clone_into), attach_(std::move(attach)) {}
  const std::string& name() const override { return name_; }
  int clone_into_fd() const override { return clone_into_; }
  const std::vector<int>& child_attach_fds() const override { return attach_; }
  std::string events_path() const override { return {}; }
  Expected<bool> populated() const override { return unsupported(); }
  Status kill_all() override { return unsupported(); }
  bool oom_killed() const override { return false; }
  Expected<OomWatch> watch_oom() override { return unsupported(); }
  Status remove() override { return unsupported(); }
  std::vector<std::string> directories() const override { return {}; }

 private:
  static Error unsupported() { return make_error("internal", "a passed cgroup is only spawned into"); }
  std::string name_ = "passed";
  int clone_into_;
  std::vector<int> attach_;
};

}  // namespace motor::sandbox
