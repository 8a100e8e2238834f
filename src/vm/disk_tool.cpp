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
                                                    const DiskToolSpec& spec, Done done) {
  if (spec.account.uid == 0 || spec.command.empty()) return make_error("vm", "disk tool: no command or a root account");
  reactor::SlowCall timed("starting a confined disk tool");
  std::unique_ptr<DiskTool> tool(new DiskTool);
  tool->done_ = std::move(done);
  tool->what_ = spec.command[0].substr(spec.command[0].rfind('/') + 1);

  sandbox::SandboxConfig box;
  box.workspace = {spec.writable_dir, spec.writable_dir};
  box.read_only = spec.read_only;
  box.uid = spec.account.uid;
  box.gid = spec.account.gid;
  box.user_name = spec.account.name;
  box.group_name = spec.account.name;
  box.hostname = "motor-disk";
  box.init_path = spec.init_path;
  box.tmp_size_bytes = uint64_t{64} << 20;
  box.deny_sockets = true;
  auto plan = sandbox::plan_sandbox(box);
  if (!plan) return plan.error();
  for (const auto& [target, text] : spec.symlinks) plan->mounts.ops.push_back(sandbox::symlink_op(target, text));
  if (!spec.symlinks.empty()) {
    if (auto s = sandbox::finish_mount_plan(plan->mounts); !s) return s.error();
  }
  const sandbox::ChildHooks hooks = sandbox::make_child_hooks(*plan);

  sandbox::CgroupLimits limits;
  limits.memory_bytes = int64_t{512} << 20;
  limits.pids_max = 64;
  auto cg = cgroups.create(spec.cgroup_name, limits);
  if (!cg) return cg.error();
  tool->cgroup_ = std::move(*cg);
  auto fail = [&](Error e) -> Error {
    (void)tool->cgroup_->remove();
    tool->cgroup_.reset();
    return e;
  };

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd out_read(fds[0]), out_write(fds[1]);
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) return fail(sys_error("opening /dev/null"));

  sandbox::SpawnSpec s;
  s.executable = sandbox::kSandboxInitPath;
  s.argv = sandbox::init_argv(spec.command);
  s.env = {"PATH=/usr/bin:/usr/sbin:/bin:/sbin", "LC_ALL=C"};
  s.cwd = spec.writable_dir;
  s.uid = spec.account.uid;
  s.gid = spec.account.gid;
  s.stdin_fd = dev_null.get();
  s.stdout_fd = out_write.get();
  s.stderr_fd = out_write.get();
  s.cgroup = tool->cgroup_.get();
  s.hooks = &hooks;
  auto spawned = sandbox::spawn_job(s);
  if (!spawned) return fail(spawned.error());
  out_write.reset();
  tool->setup_status_ = std::move(spawned->setup_status);
  auto child = reactor::ChildProcess::adopt(loop, spawned->pid, std::move(spawned->pidfd), std::move(out_read), UniqueFd(),
                                            /*timeout_ms=*/0, kMaxMessage,
                                            [self = tool.get()](reactor::ChildExit e) { self->exited(std::move(e)); });
  if (!child) {
    (void)tool->cgroup_->kill_all();
    return fail(child.error());
  }
  tool->child_ = std::move(*child);
  return tool;
}

DiskTool::~DiskTool() {
  if (!cgroup_) return;
  (void)cgroup_->kill_all();
  // The tool is killed (a job cancelled while its disks were made); its cgroup empties within
  // a few ms. Waited for at most 20 ms here; a cgroup still busy then is removed by the
  // runner's recovery at its next start (it is named in state.json). The child is reaped on the loop.
  for (int i = 0; i < 20; ++i) {
    auto populated = cgroup_->populated();
    if (!populated || !*populated) break;
    usleep(1000);
  }
  child_.reset();
  (void)cgroup_->remove();
}

void DiskTool::exited(reactor::ChildExit exit) {
  // A failed sandbox step (before exec; exit 127) is told on the setup-status pipe, short and
  // already written: read without blocking.
  std::string text = std::move(exit.out);
  char buf[512];
  fcntl(setup_status_.get(), F_SETFL, O_NONBLOCK);
  const ssize_t n = ::read(setup_status_.get(), buf, sizeof buf);
  if (n > 0) text.insert(0, std::string(buf, static_cast<size_t>(n)) + "\n");
  setup_status_.reset();
  // motor-init was PID 1 of the tool's namespace: everything else in it is being killed.
  for (int i = 0; i < 50 && !cgroup_->remove().ok(); ++i) {
    (void)cgroup_->kill_all();
    usleep(1000);
  }
  cgroup_.reset();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  Done done = std::move(done_);
  if (exit.exit_code == 0) return done(Status{});
  const std::string how = exit.term_signal ? "signal " + std::to_string(exit.term_signal)
                                           : "exit status " + std::to_string(exit.exit_code);
  done(make_error("vm", what_ + " failed (" + how + ")" + (text.empty() ? "" : ": " + text)));
}

}  // namespace motor::vm
