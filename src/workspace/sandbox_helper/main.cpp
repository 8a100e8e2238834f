// motor-workspace-sandbox: runs one command (git, over a workspace a job may have made hostile)
// in the job sandbox of src/sandbox: an empty root with the toolchain read-only, only the given
// binds, loopback-only network, the job account, no capabilities, no_new_privs, seccomp, and
// motor-init as PID 1 so nothing it starts outlives it. The runner starts it with uv_spawn.
//
//   motor-workspace-sandbox [--parent PID] [--cgroup DIR]... [--mask-special-git-files]
//       --uid U --gid G --init PATH --workspace HOST:INSIDE
//       [--ro HOST:INSIDE]... [--rw HOST:INSIDE]... --cwd DIR -- command...
//
// --parent: the runner's pid. The helper dies with it (PR_SET_PDEATHSIG, checked against a runner
// that died before the prctl), and the sandbox's PID 1 dies with the helper: nothing of a
// checkout outlives a killed runner. --cgroup: a cgroup directory (one per hierarchy) the helper
// moves itself into before anything else, so everything it starts is under its memory and pids
// limits. --mask-special-git-files: every .gitignore, .gitattributes, .gitmodules or .mailmap in
// the workspace that is a FIFO, socket or device is covered (in the helper's own mount namespace
// only) with an empty read-only file: git opens those by name, and a FIFO would block it for good.
//
// The environment is passed to the command as given (the runner passes a clean one).
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/proc.hpp"
#include "sandbox/sandbox_plan.hpp"

extern char** environ;

namespace {

bool split_bind(const std::string& arg, motor::sandbox::BindMount& out) {
  const auto colon = arg.find(':');
  if (colon == std::string::npos) return false;
  out.source = arg.substr(0, colon);
  out.target = arg.substr(colon + 1);
  return !out.source.empty() && !out.target.empty();
}

[[noreturn]] void fail(const char* what, int err) {
  std::fprintf(stderr, "motor-workspace-sandbox: %s: %s\n", what, std::strerror(err));
  _exit(125);
}

// nftw has no context argument: the count of masks made, and the first error.
int g_masked = 0;
int g_mask_error = 0;

int mask_special_git_file(const char* path, const struct stat* st, int type, FTW* ftw) {
  if (type != FTW_F) return 0;  // directories, and symlinks (FTW_PHYS: never followed)
  if (S_ISREG(st->st_mode) || !(S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode) || S_ISCHR(st->st_mode) ||
                                S_ISBLK(st->st_mode))) {
    return 0;
  }
  const char* name = path + ftw->base;
  for (const char* git_file : {".gitignore", ".gitattributes", ".gitmodules", ".mailmap"}) {
    if (std::strcmp(name, git_file) != 0) continue;
    if (mount(motor::sandbox::kMaskedEmptyFile, path, nullptr, MS_BIND, nullptr) != 0) {
      g_mask_error = errno;
      return 1;
    }
    ++g_masked;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace motor::sandbox;
  SandboxConfig config;
  config.hostname = "motor-workspace";
  config.tmp_size_bytes = uint64_t{64} << 20;
  std::string cwd = "/";
  std::vector<std::string> command;
  std::vector<std::string> cgroups;
  pid_t parent = 0;
  bool mask_git_files = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "motor-workspace-sandbox: %s needs a value\n", a.c_str());
        std::exit(125);
      }
      return argv[++i];
    };
    BindMount bind;
    if (a == "--parent") parent = static_cast<pid_t>(std::strtol(next().c_str(), nullptr, 10));
    else if (a == "--cgroup") cgroups.push_back(next());
    else if (a == "--mask-special-git-files") mask_git_files = true;
    else if (a == "--uid") config.uid = static_cast<uid_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--gid") config.gid = static_cast<gid_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--init") config.init_path = next();
    else if (a == "--cwd") cwd = next();
    else if (a == "--workspace" && split_bind(next(), bind)) config.workspace = bind;
    else if (a == "--ro" && split_bind(next(), bind)) config.read_only.push_back(bind);
    else if (a == "--rw" && split_bind(next(), bind)) config.writable.push_back(bind);
    else if (a == "--") {
      command.assign(argv + i + 1, argv + argc);
      break;
    } else {
      std::fprintf(stderr, "motor-workspace-sandbox: unknown or malformed argument %s\n", a.c_str());
      return 125;
    }
  }
  if (config.uid == 0 || config.gid == 0 || command.empty() || config.workspace.source.empty()) {
    std::fprintf(stderr, "motor-workspace-sandbox: --uid, --gid (not root), --workspace and a command are required\n");
    return 125;
  }
  if (parent > 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) fail("PR_SET_PDEATHSIG", errno);
    if (getppid() != parent) {
      std::fprintf(stderr, "motor-workspace-sandbox: the runner (pid %d) is gone\n", static_cast<int>(parent));
      return 125;
    }
  }
  for (const auto& dir : cgroups) {
    const std::string procs = dir + "/cgroup.procs";
    const int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) fail(procs.c_str(), errno);
    close(fd);
  }
  auto plan = plan_sandbox(config);
  if (!plan) {
    std::fprintf(stderr, "motor-workspace-sandbox: %s\n", plan.error().message.c_str());
    return 125;
  }
  const ChildHooks hooks = make_child_hooks(*plan);
  // New namespaces for the child; CLONE_NEWPID applies to the fork below, which is PID 1.
  if (unshare(static_cast<int>(hooks.clone_flags)) != 0) fail("unshare", errno);
  const pid_t child = fork();
  if (child < 0) fail("fork", errno);
  if (child == 0) {
    const char* stage = "sandbox";
    if (int err = hooks.before_credentials(stage); err != 0) fail(stage, err);
    if (mask_git_files) {
      // Still root, in the sandbox's own mount namespace, after the pivot: the workspace is at
      // its target. No job runs in it now (the runner scans after the job's cgroup is empty).
      if (nftw(config.workspace.target.c_str(), mask_special_git_file, 64, FTW_PHYS | FTW_MOUNT) != 0 && g_mask_error)
        fail("masking special git files", g_mask_error);
    }
    if (chdir(cwd.c_str()) < 0) fail("entering the working directory", errno);
    if (setgroups(1, &config.gid) < 0) fail("setgroups", errno);
    if (setresgid(config.gid, config.gid, config.gid) < 0) fail("setresgid", errno);
    if (setresuid(config.uid, config.uid, config.uid) < 0) fail("setresuid", errno);
    // Set after the uid change (which clears it): if the runner kills this helper, PID 1 of
    // the sandbox dies, and with it everything in the namespace.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) fail("PR_SET_PDEATHSIG", errno);
    if (int err = hooks.after_credentials(stage); err != 0) fail(stage, err);
    const std::vector<std::string> args = init_argv(command);
    std::vector<char*> cargs;
    for (const auto& s : args) cargs.push_back(const_cast<char*>(s.c_str()));
    cargs.push_back(nullptr);
    if (hooks.exec_fd >= 0) syscall(SYS_execveat, hooks.exec_fd, "", cargs.data(), environ, AT_EMPTY_PATH);
    else execve(kSandboxInitPath, cargs.data(), environ);
    fail("exec motor-init", errno);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) fail("waitpid", errno);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}
