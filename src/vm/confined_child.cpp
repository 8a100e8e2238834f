#include "vm/confined_child.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <optional>

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

Expected<ConfinedChild> spawn_confined(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, sandbox::Starter& starter,
                                       const sandbox::SandboxConfig& box, ConfinedCommand cmd, ConfinedDone done) {
  if (box.uid == 0 || cmd.command.empty()) return make_error("vm", "a confined command needs a command and no root");
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
  s.stdin_fd = dev_null.get();
  s.stdout_fd = out_write.get();
  s.stderr_fd = out_write.get();
  s.cgroup = out.cgroup.get();
  sandbox::SandboxedChild::Watch watch;
  watch.stdout_read = std::move(out_read);
  watch.timeout_ms = cmd.timeout_ms;
  watch.max_stdout_bytes = cmd.max_output_bytes;
  watch.stream_stdout = std::move(cmd.stream_output);
  // A failure the starter reports at once is this function's error; a later one goes to `done`.
  auto starting = std::make_shared<bool>(true);
  auto failed_at_once = std::make_shared<std::optional<Error>>();
  sandbox::SandboxedChild::Events events;
  events.start_failed = [done, starting, failed_at_once](const Error& e) {
    if (*starting) *failed_at_once = e;
    else done(e);
  };
  events.exited = [done](sandbox::SandboxedExit e) { done(std::move(e)); };
  out.child = sandbox::SandboxedChild::start(loop, starter, box, s, std::move(watch), std::move(events));
  *starting = false;
  if (*failed_at_once) return **failed_at_once;
  return out;
}

std::string describe_exit(const sandbox::SandboxedExit& exit) {
  return exit.child.term_signal ? "signal " + std::to_string(exit.child.term_signal)
                                : "exit status " + std::to_string(exit.child.exit_code);
}

}  // namespace motor::vm
