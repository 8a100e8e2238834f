#include "vm/prep_step.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>

#include "motor/sys_error.hpp"
#include "reactor/slow_call.hpp"

namespace motor::vm {

Status mount_prep_output(const std::string& dir, int64_t max_bytes, const sandbox::Account& owner) {
  const std::string options = "size=" + std::to_string(max_bytes) + ",mode=0700,uid=" + std::to_string(owner.uid) +
                              ",gid=" + std::to_string(owner.gid);
  if (mount("motor-prep", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0) {
    return sys_error("mounting the preparation's tmpfs at " + dir);
  }
  return {};
}

Status unmount_prep_output(const std::string& dir) {
  if (umount2(dir.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL && errno != ENOENT) {
    return sys_error("unmounting " + dir);
  }
  return {};
}

Expected<TransferStage> stage_transfer_tree(const std::string& stage, const std::string& workspace_dir,
                                            const std::string& prep_dir, const sandbox::Account& prep_owner,
                                            const sandbox::Account& reader) {
  constexpr size_t kMaxEntries = 4096;
  reactor::SlowCall timed("listing a workspace's root for its transfer disk");
  TransferStage out;
  DIR* d = opendir(workspace_dir.c_str());
  if (!d) return sys_error("listing " + workspace_dir);
  const int dir_fd = dirfd(d);
  Status bad;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == kPrepResultOnTransferDisk) continue;
    if (out.read_only.size() + out.symlinks.size() >= kMaxEntries) {
      bad = make_error("vm", "the workspace's root holds more than " + std::to_string(kMaxEntries) +
                                 " entries, too many for a prepared transfer disk");
      break;
    }
    struct stat st {};
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      bad = sys_error("checking " + workspace_dir + "/" + name);
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
      const ssize_t n = readlinkat(dir_fd, name.c_str(), text.data(), text.size());
      if (n < 0 || static_cast<size_t>(n) >= text.size()) {
        bad = sys_error("reading the symlink " + workspace_dir + "/" + name);
        break;
      }
      text.resize(static_cast<size_t>(n));
      out.symlinks.emplace_back(stage + "/" + name, text);
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      out.read_only.push_back({workspace_dir + "/" + name, stage + "/" + name});
    } else {
      bad = make_error("vm", "the workspace's root holds " + name + ", neither a file, a directory nor a symlink");
      break;
    }
  }
  closedir(d);
  if (!bad) return bad.error();
  sandbox::BindMount result{prep_dir, stage + "/" + kPrepResultOnTransferDisk};
  result.idmap = sandbox::IdMap{prep_owner.uid, reader.uid, prep_owner.gid, reader.gid};
  out.read_only.push_back(std::move(result));
  return out;
}

Expected<std::unique_ptr<PrepStep>> PrepStep::start(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, const PrepSpec& spec,
                                                    Output output, Done done) {
  if (spec.account.uid == 0 || spec.account.uid == spec.workspace_owner.uid) {
    return make_error("vm", "the preparation needs an account of its own (motor-prep), not root or the job's");
  }
  reactor::SlowCall timed("starting a VM job's dependency preparation");
  std::unique_ptr<PrepStep> step(new PrepStep);
  step->output_ = std::move(output);
  step->done_ = std::move(done);
  step->timeout_ms_ = spec.timeout_ms;

  sandbox::SandboxConfig box;
  box.workspace = {spec.output_dir, kPrepOutputInSandbox};
  sandbox::BindMount workspace{spec.workspace_dir, kPrepWorkspaceInSandbox};
  workspace.idmap = sandbox::IdMap{spec.workspace_owner.uid, spec.account.uid, spec.workspace_owner.gid, spec.account.gid};
  box.read_only.push_back(std::move(workspace));
  for (const auto& path : spec.read_only_paths) box.read_only.push_back({path, path});
  box.uid = spec.account.uid;
  box.gid = spec.account.gid;
  box.user_name = spec.account.name;
  box.group_name = spec.account.name;
  box.hostname = "motor-prep";
  box.init_path = spec.init_path;
  box.tmp_size_bytes = spec.tmp_bytes;
  box.network = spec.network;
  auto plan = sandbox::plan_sandbox(box);
  if (!plan) return plan.error();
  const sandbox::ChildHooks hooks = sandbox::make_child_hooks(*plan);

  auto cg = cgroups.create(spec.cgroup_name, spec.limits);
  if (!cg) return cg.error();
  step->cgroup_ = std::move(*cg);
  auto fail = [&](Error e) -> Error {
    step->remove_cgroup();
    return e;
  };

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return fail(sys_error("pipe2"));
  UniqueFd out_read(fds[0]), out_write(fds[1]);
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) return fail(sys_error("opening /dev/null"));

  sandbox::SpawnSpec s;
  s.executable = sandbox::kSandboxInitPath;
  s.argv = sandbox::init_argv({"/bin/sh", "-c", spec.command});
  // HOME is the private /tmp: a tool's caches (CARGO_HOME) go there, not into the result.
  s.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LC_ALL=C.UTF-8", "USER=" + spec.account.name,
           std::string("MOTOR_PREP_OUT=") + kPrepOutputInSandbox, std::string("MOTOR_WORKSPACE=") + kPrepWorkspaceInSandbox};
  s.cwd = kPrepWorkspaceInSandbox;
  s.uid = spec.account.uid;
  s.gid = spec.account.gid;
  s.stdin_fd = dev_null.get();
  s.stdout_fd = out_write.get();
  s.stderr_fd = out_write.get();
  s.cgroup = step->cgroup_.get();
  s.hooks = &hooks;
  auto spawned = sandbox::spawn_job(s);
  if (!spawned) return fail(spawned.error());
  out_write.reset();
  step->setup_status_ = std::move(spawned->setup_status);
  PrepStep* self = step.get();
  auto child = reactor::ChildProcess::adopt(loop, spawned->pid, std::move(spawned->pidfd), std::move(out_read), UniqueFd(),
                                            spec.timeout_ms, static_cast<size_t>(spec.max_output_bytes),
                                            [self](reactor::ChildExit e) { self->exited(std::move(e)); });
  if (!child) {
    (void)step->cgroup_->kill_all();
    return fail(child.error());
  }
  step->child_ = std::move(*child);
  step->child_->stream_stdout([self](std::string_view bytes) {
    if (const std::string text = self->utf8_.feed(bytes); !text.empty()) self->output_(text);
  });
  return step;
}

void PrepStep::stop() {
  done_ = nullptr;
  remove_cgroup();
  child_.reset();  // reaped on the loop
}

void PrepStep::remove_cgroup() {
  if (!cgroup_) return;
  // motor-init is PID 1 of the step's PID namespace, and the cgroup holds everything it started.
  (void)cgroup_->kill_all();
  for (int i = 0; i < 50; ++i) {
    auto populated = cgroup_->populated();
    if (!populated || !*populated) break;
    usleep(1000);
  }
  (void)cgroup_->remove();
  cgroup_.reset();
}

void PrepStep::exited(reactor::ChildExit exit) {
  std::string setup_failure;  // a sandbox step that failed before exec says which, on this pipe
  char buf[512];
  fcntl(setup_status_.get(), F_SETFL, O_NONBLOCK);
  if (const ssize_t n = ::read(setup_status_.get(), buf, sizeof buf); n > 0) setup_failure.assign(buf, static_cast<size_t>(n));
  setup_status_.reset();
  remove_cgroup();
  std::string tail = utf8_.flush();
  if (exit.stdout_truncated) tail += "\nmotor: the preparation's output stopped after " + std::to_string(exit.max_stdout_bytes) + " bytes\n";
  if (!tail.empty()) output_(tail);
  Done done = std::move(done_);
  if (!done) return;
  if (exit.timed_out) return done(make_error("vm", "it ran past vm_prepare_timeout_s (" + std::to_string(timeout_ms_ / 1000) + " s)"));
  if (!setup_failure.empty()) return done(make_error("vm", "its sandbox could not be set up: " + setup_failure));
  if (exit.exit_code == 0) return done(Status{});
  done(make_error("vm", exit.term_signal ? "signal " + std::to_string(exit.term_signal)
                                         : "exit status " + std::to_string(exit.exit_code)));
}

}  // namespace motor::vm
