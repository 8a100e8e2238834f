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
  return spawn_job(spec);
}

void InProcessStarter::spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) {
  SandboxedSpawn job;
  done(job.run(box, spec));
}

}  // namespace motor::sandbox
