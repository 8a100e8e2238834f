#include "sandbox/starter.hpp"

namespace motor::sandbox {

Expected<SpawnedProcess> SandboxedSpawn::run(const SandboxConfig& box, SpawnSpec spec, int prepared_net_fd) {
  auto planned = plan_sandbox(box);
  if (!planned) return make_error(planned.error().code, "the sandbox cannot be built: " + planned.error().message);
  plan.emplace(std::move(*planned));
  if (prepared_net_fd >= 0) use_prepared_network_namespace(plan->namespaces, prepared_net_fd);
  hooks = make_child_hooks(*plan);
  spec.hooks = &hooks;
  spec.uid = box.uid;
  spec.gid = box.gid;
  const uint64_t planned_ns = monotonic_ns();
  auto spawned = spawn_job(spec);
  if (spawned) {
    spawned->times.planned_ns = planned_ns;
    spawned->times.cloned_ns = monotonic_ns();
    if (hooks.stamps) spawned->times.child = *hooks.stamps;  // written by a child that shared our memory
  }
  return spawned;
}

void Starter::adopt_sandbox(pid_t, int, const JobCgroup*, const std::vector<LateBind>&, std::function<void(Status)> done) {
  done(make_error("internal", "only the job starter's helper process can mount into a waiting sandbox"));
}

void InProcessStarter::spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) {
  SandboxedSpawn job;
  done(job.run(box, spec));
}

}  // namespace motor::sandbox
