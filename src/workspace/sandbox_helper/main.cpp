// motor-workspace-sandbox: runs one command (git, over a workspace a job may have made hostile)
// in the job sandbox of src/sandbox: an empty root with the toolchain read-only, only the given
// binds, loopback-only network, the job account, no capabilities, no_new_privs, seccomp, and
// motor-init as PID 1 so nothing it starts outlives it. The runner starts it with uv_spawn.
//
//   motor-workspace-sandbox --uid U --gid G --init PATH --workspace HOST:INSIDE
//       [--ro HOST:INSIDE]... [--rw HOST:INSIDE]... --cwd DIR -- command...
//
// The environment is passed to the command as given (the runner passes a clean one).
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  using namespace motor::sandbox;
  SandboxConfig config;
  config.hostname = "motor-workspace";
  config.tmp_size_bytes = uint64_t{64} << 20;
  std::string cwd = "/";
  std::vector<std::string> command;
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
    if (a == "--uid") config.uid = static_cast<uid_t>(std::strtoul(next().c_str(), nullptr, 10));
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
    execve(kSandboxInitPath, cargs.data(), environ);
    fail("exec motor-init", errno);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) fail("waitpid", errno);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}
