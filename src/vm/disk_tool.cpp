#include "vm/disk_tool.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "motor/sys_error.hpp"
#include "reactor/slow_call.hpp"

namespace motor::vm {
namespace {
constexpr size_t kMaxMessage = 2048;
}

std::vector<std::string> qemu_img_overlay_command(const std::string& sealed, const std::string& overlay) {
  return {"/usr/bin/qemu-img", "create", "-q", "-f", "qcow2", "-b", sealed, "-F", "qcow2", overlay};
}

std::vector<std::string> mke2fs_from_dir_command(const std::string& source_dir, const std::string& image, int64_t size_bytes) {
  return {"/usr/sbin/mke2fs", "-q", "-F", "-t", "ext4", "-L", "motor-transfer", "-E", "root_owner=0:0", "-d", source_dir,
          image, std::to_string(size_bytes / 1024) + "k"};
}

Expected<std::unique_ptr<DiskTool>> DiskTool::start(uv_loop_t* loop, sandbox::CgroupDriver& cgroups,
                                                    sandbox::Starter& starter, const DiskToolSpec& spec, Done done) {
  if (spec.account.uid == 0 || spec.command.empty()) return make_error("vm", "disk tool: no command or a root account");
  reactor::SlowCall timed("starting a confined disk tool");
  std::unique_ptr<DiskTool> tool(new DiskTool);
  tool->done_ = std::move(done);
  tool->what_ = spec.command[0].substr(spec.command[0].rfind('/') + 1);

  sandbox::SandboxConfig box = confined_box(spec.account, "motor-disk", spec.init_path, uint64_t{64} << 20);
  box.workspace = {spec.writable_dir, spec.writable_dir};
  box.read_only = spec.read_only;
  box.symlinks = spec.symlinks;
  box.deny_sockets = true;
  ConfinedCommand cmd;
  cmd.command = spec.command;
  cmd.env = {"PATH=/usr/bin:/usr/sbin:/bin:/sbin", "LC_ALL=C"};
  cmd.cwd = spec.writable_dir;
  cmd.cgroup_name = spec.cgroup_name;
  cmd.limits.memory_bytes = int64_t{512} << 20;
  cmd.limits.pids_max = 64;
  cmd.max_output_bytes = kMaxMessage;
  auto confined = spawn_confined(loop, cgroups, starter, box, std::move(cmd),
                                 [self = tool.get()](Expected<sandbox::SandboxedExit> e) { self->exited(std::move(e)); });
  if (!confined) return confined.error();
  tool->confined_ = std::move(*confined);
  return tool;
}

DiskTool::~DiskTool() {
  // The tool is killed (a job cancelled while its disks were made) and its cgroup removed, by
  // the reaper once it is empty. The child is reaped on the loop.
  confined_.cgroup.reset();
  confined_.child.reset();
}

void DiskTool::exited(Expected<sandbox::SandboxedExit> exit) {
  // motor-init was PID 1 of the tool's namespace: everything else in it is being killed, and
  // the cgroup goes once it is empty.
  confined_.cgroup.reset();
  Done done = std::move(done_);
  if (!exit) return done(make_error("vm", what_ + " could not start: " + exit.error().message));
  // A failed sandbox step (before exec; exit 127) is told on the setup-status pipe.
  std::string text = std::move(exit->child.out);
  if (!exit->setup_failure.empty()) text.insert(0, exit->setup_failure + "\n");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (exit->child.exit_code == 0) return done(Status{});
  done(make_error("vm", what_ + " failed (" + describe_exit(*exit) + ")" + (text.empty() ? "" : ": " + text)));
}

}  // namespace motor::vm
