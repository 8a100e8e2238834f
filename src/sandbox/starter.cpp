#include "sandbox/starter.hpp"

#include <sys/socket.h>

#include "motor/sys_error.hpp"

namespace motor::sandbox {

Expected<SpawnedProcess> SandboxedSpawn::run(const SandboxConfig& box, SpawnSpec spec, int prepared_net_fd) {
  auto planned = plan_sandbox(box);
  if (!planned) return make_error(planned.error().code, "the sandbox cannot be built: " + planned.error().message);
  plan.emplace(std::move(*planned));
  if (prepared_net_fd >= 0) use_prepared_network_namespace(plan->namespaces, prepared_net_fd);
  hooks = make_child_hooks(*plan);
  // A sandbox built ahead is entered later to mount its job's workspace: through its mount
  // namespace's fd, which only the child can open without a ptrace access check.
  UniqueFd ns_ours, ns_childs;
  if (box.workspace_later) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return sys_error("socketpair");
    ns_ours = UniqueFd(pair[0]);
    ns_childs = UniqueFd(pair[1]);
    hooks.mount_ns_report_fd = ns_childs.get();
  }
  spec.hooks = &hooks;
  spec.uid = box.uid;
  spec.gid = box.gid;
  const uint64_t planned_ns = monotonic_ns();
  auto spawned = spawn_job(spec);
  ns_childs.reset();  // the child's copy is then the only one: EOF once it has exec'd or died
  if (spawned) {
    spawned->times.planned_ns = planned_ns;
    spawned->times.cloned_ns = monotonic_ns();
    if (hooks.stamps) spawned->times.child = *hooks.stamps;  // written by a child that shared our memory
    if (ns_ours) {
      // Without it the sandbox is still a sandbox, only not one a job can be put into:
      // adopt_sandbox refuses it ("the sandbox sent no mount namespace").
      if (auto ns = receive_mount_namespace(ns_ours.get())) spawned->mount_ns = std::move(*ns);
    }
  }
  return spawned;
}

void Starter::adopt_sandbox(pid_t, int, const JobCgroup*, const CgroupRequest*, const std::vector<LateBind>&,
                            std::function<void(Status)> done) {
  done(make_error("internal", "only the job starter's helper process can mount into a waiting sandbox"));
}

void InProcessStarter::spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) {
  SandboxedSpawn job;
  done(job.run(box, spec));
}

}  // namespace motor::sandbox
