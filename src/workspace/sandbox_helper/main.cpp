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
// The environment is passed to the command as given (the runner passes a clean one). The sandbox
// is started as everything sandboxed is (sandbox/sandboxed_child.hpp), in process and on a loop
// of its own; --mask-special-git-files is SandboxConfig::mask_special_git_files.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/sandboxed_child.hpp"
#include "sandbox/starter.hpp"

extern char** environ;

namespace {

using motor::sandbox::BindMount;
using motor::sandbox::SandboxConfig;

constexpr int kHelperFailed = 125;

struct Arguments {
  SandboxConfig box;
  std::string cwd = "/";
  std::vector<std::string> command;
  std::vector<std::string> cgroups;
  pid_t parent = 0;
};

bool split_bind(const std::string& arg, BindMount& out) {
  const auto colon = arg.find(':');
  if (colon == std::string::npos) return false;
  out.source = arg.substr(0, colon);
  out.target = arg.substr(colon + 1);
  return !out.source.empty() && !out.target.empty();
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "motor-workspace-sandbox: %s\n", what.c_str());
  _exit(kHelperFailed);
}

Arguments parse(int argc, char** argv) {
  Arguments a;
  a.box.hostname = "motor-workspace";
  a.box.tmp_size_bytes = uint64_t{64} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail(arg + " needs a value");
      return argv[++i];
    };
    BindMount bind;
    if (arg == "--parent") a.parent = static_cast<pid_t>(std::strtol(next().c_str(), nullptr, 10));
    else if (arg == "--cgroup") a.cgroups.push_back(next());
    else if (arg == "--mask-special-git-files") a.box.mask_special_git_files = true;
    else if (arg == "--uid") a.box.uid = static_cast<uid_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (arg == "--gid") a.box.gid = static_cast<gid_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (arg == "--init") a.box.init_path = next();
    else if (arg == "--cwd") a.cwd = next();
    else if (arg == "--workspace" && split_bind(next(), bind)) a.box.workspace = bind;
    else if (arg == "--ro" && split_bind(next(), bind)) a.box.read_only.push_back(bind);
    else if (arg == "--rw" && split_bind(next(), bind)) a.box.writable.push_back(bind);
    else if (arg == "--") {
      a.command.assign(argv + i + 1, argv + argc);
      break;
    } else {
      fail("unknown or malformed argument " + arg);
    }
  }
  if (a.box.uid == 0 || a.box.gid == 0 || a.command.empty() || a.box.workspace.source.empty()) {
    fail("--uid, --gid (not root), --workspace and a command are required");
  }
  return a;
}

// Dies with the runner, and moves into the helper cgroups before anything else is started.
void attach(const Arguments& a) {
  if (a.parent > 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) fail(std::string("PR_SET_PDEATHSIG: ") + std::strerror(errno));
    if (getppid() != a.parent) fail("the runner (pid " + std::to_string(a.parent) + ") is gone");
  }
  for (const auto& dir : a.cgroups) {
    const std::string procs = dir + "/cgroup.procs";
    const int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) fail(procs + ": " + std::strerror(errno));
    close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace motor::sandbox;
  const Arguments a = parse(argc, argv);
  attach(a);
  uv_loop_t loop;
  if (const int rc = uv_loop_init(&loop); rc != 0) fail(std::string("the event loop: ") + uv_strerror(rc));
  PassedCgroup own_cgroup;  // the child stays in this process's cgroups
  SpawnSpec spec;
  spec.executable = kSandboxInitPath;
  spec.argv = init_argv(a.command);
  for (char** e = environ; *e; ++e) spec.env.emplace_back(*e);
  spec.cwd = a.cwd;
  spec.stdin_fd = 0;
  spec.stdout_fd = 1;
  spec.stderr_fd = 2;
  spec.cgroup = &own_cgroup;
  spec.die_with_parent = true;  // if the runner kills this helper, PID 1 of the sandbox dies too
  int code = kHelperFailed;
  SandboxedChild::Events events;
  events.start_failed = [](const motor::Error& e) { std::fprintf(stderr, "motor-workspace-sandbox: %s\n", e.message.c_str()); };
  events.exited = [&code](SandboxedExit e) {
    if (!e.setup_failure.empty()) {  // a sandbox step, or motor-init's exec
      std::fprintf(stderr, "motor-workspace-sandbox: %s\n", e.setup_failure.c_str());
      return;  // kHelperFailed
    }
    code = WIFEXITED(e.wait_status) ? WEXITSTATUS(e.wait_status) : 128 + WTERMSIG(e.wait_status);
  };
  InProcessStarter starter;
  auto child = SandboxedChild::start(&loop, starter, a.box, spec, {}, std::move(events));
  uv_run(&loop, UV_RUN_DEFAULT);
  child.reset();
  uv_run(&loop, UV_RUN_DEFAULT);
  (void)uv_loop_close(&loop);
  return code;
}
