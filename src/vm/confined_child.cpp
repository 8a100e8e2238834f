#include "vm/confined_child.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "motor/sys_error.hpp"

namespace motor::vm {

sandbox::SandboxConfig confined_box(const sandbox::Account& account, const std::string& hostname,
                                    const std::string& init_path, uint64_t tmp_bytes) {
  sandbox::SandboxConfig box;
  box.uid = account.uid;
  box.gid = account.gid;
  box.user_name = account.name;
  box.group_name = account.name;
  box.hostname = hostname;
  box.init_path = init_path;
  box.tmp_size_bytes = tmp_bytes;
  return box;
}

Expected<ConfinedChild> spawn_confined(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, const sandbox::SandboxPlan& plan,
                                       const ConfinedCommand& cmd, reactor::ChildProcess::Done done) {
  if (cmd.account.uid == 0 || cmd.command.empty()) return make_error("vm", "a confined command needs a command and no root");
  const sandbox::ChildHooks hooks = sandbox::make_child_hooks(plan);
  auto cg = cgroups.create(cmd.cgroup_name, cmd.limits);
  if (!cg) return cg.error();
  ConfinedChild out;
  out.cgroup = std::move(*cg);
  // From here on an error return removes the cgroup again (out.cgroup's destructor).
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd out_read(fds[0]), out_write(fds[1]);
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) return sys_error("opening /dev/null");

  sandbox::SpawnSpec s;
  s.executable = sandbox::kSandboxInitPath;
  s.argv = sandbox::init_argv(cmd.command);
  s.env = cmd.env;
  s.cwd = cmd.cwd;
  s.uid = cmd.account.uid;
  s.gid = cmd.account.gid;
  s.stdin_fd = dev_null.get();
  s.stdout_fd = out_write.get();
  s.stderr_fd = out_write.get();
  s.cgroup = out.cgroup.get();
  s.hooks = &hooks;
  auto spawned = sandbox::spawn_job(s);
  if (!spawned) return spawned.error();
  out_write.reset();
  out.setup_status = std::move(spawned->setup_status);
  auto child = reactor::ChildProcess::adopt(loop, spawned->pid, std::move(spawned->pidfd), std::move(out_read), UniqueFd(),
                                            cmd.timeout_ms, cmd.max_output_bytes, std::move(done));
  if (!child) return child.error();
  out.child = std::move(*child);
  return out;
}

std::string read_setup_failure(UniqueFd& setup_status) {
  std::string text;
  if (!setup_status) return text;
  char buf[512];
  fcntl(setup_status.get(), F_SETFL, O_NONBLOCK);
  if (const ssize_t n = ::read(setup_status.get(), buf, sizeof buf); n > 0) text.assign(buf, static_cast<size_t>(n));
  setup_status.reset();
  return text;
}

}  // namespace motor::vm
