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

Expected<std::unique_ptr<PrepStep>> PrepStep::start(uv_loop_t* loop, sandbox::CgroupDriver& cgroups,
                                                    sandbox::Starter& starter, const PrepSpec& spec, Output output,
                                                    Done done) {
  if (spec.account.uid == 0 || spec.account.uid == spec.workspace_owner.uid) {
    return make_error("vm", "the preparation needs an account of its own (motor-prep), not root or the job's");
  }
  reactor::SlowCall timed("starting a VM job's dependency preparation");
  std::unique_ptr<PrepStep> step(new PrepStep);
  step->output_ = std::move(output);
  step->done_ = std::move(done);
  step->timeout_ms_ = spec.timeout_ms;

  sandbox::SandboxConfig box = confined_box(spec.account, "motor-prep", spec.init_path, spec.tmp_bytes);
  box.workspace = {spec.output_dir, kPrepOutputInSandbox};
  sandbox::BindMount workspace{spec.workspace_dir, kPrepWorkspaceInSandbox};
  workspace.idmap = sandbox::IdMap{spec.workspace_owner.uid, spec.account.uid, spec.workspace_owner.gid, spec.account.gid};
  box.read_only.push_back(std::move(workspace));
  for (const auto& path : spec.read_only_paths) box.read_only.push_back({path, path});
  box.network = spec.network;
  ConfinedCommand cmd;
  cmd.command = {"/bin/sh", "-c", spec.command};
  // HOME is the private /tmp: a tool's caches (CARGO_HOME) go there, not into the result.
  cmd.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LC_ALL=C.UTF-8", "USER=" + spec.account.name,
             std::string("MOTOR_PREP_OUT=") + kPrepOutputInSandbox, std::string("MOTOR_WORKSPACE=") + kPrepWorkspaceInSandbox};
  cmd.cwd = kPrepWorkspaceInSandbox;
  cmd.cgroup_name = spec.cgroup_name;
  cmd.limits = spec.limits;
  cmd.timeout_ms = spec.timeout_ms;
  cmd.max_output_bytes = static_cast<size_t>(spec.max_output_bytes);
  PrepStep* self = step.get();
  cmd.stream_output = [self](std::string_view bytes) {
    if (const std::string text = self->utf8_.feed(bytes); !text.empty() && self->output_) self->output_(text);
  };
  auto confined = spawn_confined(loop, cgroups, starter, box, std::move(cmd),
                                 [self](Expected<sandbox::SandboxedExit> e) { self->exited(std::move(e)); });
  if (!confined) return confined.error();
  step->confined_ = std::move(*confined);
  return step;
}

void PrepStep::stop() {
  done_ = nullptr;
  remove_cgroup();
  confined_.child.reset();  // reaped on the loop
}

void PrepStep::kill() {
  done_ = nullptr;
  output_ = nullptr;
  if (confined_.cgroup) (void)confined_.cgroup->kill_all();
}

bool PrepStep::processes_gone() const {
  if (!confined_.cgroup) return true;
  auto populated = confined_.cgroup->populated();
  return !populated || !*populated;
}

// The cgroup holds everything the command started, also what left motor-init's PID namespace:
// killed now, removed once empty (sandbox/cgroup_reaper.hpp).
void PrepStep::remove_cgroup() { confined_.cgroup.reset(); }

void PrepStep::exited(Expected<sandbox::SandboxedExit> exit) {
  remove_cgroup();
  std::string tail = utf8_.flush();
  if (exit && exit->child.stdout_truncated) {
    tail += "\nmotor: the preparation's output stopped after " + std::to_string(exit->child.max_stdout_bytes) + " bytes\n";
  }
  if (!tail.empty() && output_) output_(tail);
  Done done = std::move(done_);
  if (!done) return;
  if (!exit) return done(make_error("vm", "it could not start: " + exit.error().message));
  if (exit->child.timed_out) return done(make_error("vm", "it ran past vm_prepare_timeout_s (" + std::to_string(timeout_ms_ / 1000) + " s)"));
  if (!exit->setup_failure.empty()) return done(make_error("vm", "its sandbox could not be set up: " + exit->setup_failure));
  if (exit->child.exit_code == 0) return done(Status{});
  done(make_error("vm", describe_exit(*exit)));
}

}  // namespace motor::vm
