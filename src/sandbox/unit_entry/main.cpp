// motor-unit-entry: the ExecStart of a job's transient systemd unit (job_backend = systemd,
// runner/job_systemd.hpp). systemd made the unit's cgroup, its limits (MemoryMax, TasksMax,
// AllowedCPUs), User=motor-job, NoNewPrivileges and an empty capability bounding set; this
// program, holding no capability, builds the rest of the job sandbox with the same plan and child
// code as the direct backend (sandbox_plan.hpp, spawn.hpp) in a user namespace of the job's own
// (user_namespace.hpp): an empty root, PID, mount, network, IPC, UTS and cgroup namespaces,
// seccomp, and motor-init as PID 1.
//
// Its stdin (fd 0) is a Unix socket to the runner, passed as the unit's StandardInput. The runner
// writes one request: u32 length (host order), then the SandboxConfig and the SpawnSpec in
// sandbox_codec.hpp's wire form. Its stdout and stderr are the job's output pipes, the runner's
// own (StandardOutput=fd). It answers on fd 0, one line each:
//   pid N\n            its own pid: the runner watches it exit (a pidfd), the moment the unit's
//                      cgroup can be empty (a cgroup.events notification may come 10 ms late)
//   events DIR\n       its unified (cgroup2) directory: the runner ends the job once its
//                      cgroup.events says "populated 0", without waiting for systemd to unload
//                      the unit
//   cgroup DIR\n       its memory cgroup (before the sandbox): the runner sets what systemd does
//                      not (memory.kmem.tcp.limit_in_bytes on v1) and answers "go\n"; the
//                      entry plans the sandbox meanwhile and clones the job only after "go"
//   steps R P C S M F Y\n when it read the request, planned, saw its clone return, and when the
//                      child started, mounted, was confined and ready (CLOCK_MONOTONIC ns, 0:
//                      not known), for the runner's start steps (runner/start_steps.hpp)
//   setup\n            the command was exec'd (motor-init runs it)
//   setup TEXT\n       the sandbox's setup failed, or "exec: ..." the command could not be exec'd
//   exited W O U S P\n motor-init ended with wait status W; the unit's memory cgroup counted O OOM
//                      kills; the unit's CPU time (user U, system S, in us) and peak memory P
//                      (bytes), -1 where the cgroup has no such file
// and exits: 0 after "exited", 127 before it. Nothing else of it writes to the job's output.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "motor/fd_io.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/cgroup_usage.hpp"
#include "sandbox/pipestatus.hpp"
#include "sandbox/sandbox_codec.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "sandbox/spawn.hpp"
#include "sandbox/starter.hpp"

namespace {

using namespace motor;

constexpr uint32_t kMaxRequestBytes = 1 << 20;
constexpr int kControl = 0;

void answer(const std::string& line) {
  std::string text = line;
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  text += '\n';
  (void)write_all(kControl, text.data(), text.size());
}

[[noreturn]] void give_up(const std::string& why) {
  answer("setup " + why);
  _exit(127);
}

// This process's cgroup directories, from /proc/self/cgroup: each v1 hierarchy's (under the
// mount named after its controllers) and the unified one; `memory`: the memory controller's;
// `unified`: the cgroup2 one (its cgroup.events).
struct OwnCgroups {
  std::vector<std::string> directories;
  std::string memory, unified;
};

OwnCgroups own_cgroups() {
  OwnCgroups own;
  const bool hybrid = ::access("/sys/fs/cgroup/unified", F_OK) == 0;
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (controllers.rfind("name=", 0) == 0) continue;
    const std::string dir = controllers.empty() ? (hybrid ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup") + path
                                                : "/sys/fs/cgroup/" + controllers + path;
    own.directories.push_back(dir);
    if (controllers.empty()) own.unified = dir;
    if (controllers.empty() && own.memory.empty()) own.memory = dir;
    for (size_t at = 0; at <= controllers.size();) {
      const auto comma = controllers.find(',', at);
      if (controllers.substr(at, comma - at) == "memory") own.memory = dir;
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  return own;
}

// OOM kills counted by the memory controller: v1 memory.oom_control (this host's hybrid layout)
// or v2 memory.events.
long long oom_kills(const std::string& memory_dir) {
  std::ifstream in(memory_dir + "/memory.oom_control");
  if (!in) in.open(memory_dir + "/memory.events");
  std::string key;
  long long value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

// The runner charges socket buffers to the unit's v1 memory cgroup (memory.kmem.tcp, which
// systemd 252 does not set) before the job makes any: after the "cgroup DIR" line, its "go".
void await_runner_limits() {
  std::string reply;
  char c = 0;
  while (reply.size() < 512 && read_exact(kControl, &c, 1) && c != '\n') reply += c;
  if (reply != "go") give_up("motor-unit-entry: the runner did not set the unit's limits: " + reply);
}

std::string usage_fields(const std::vector<std::string>& directories) {
  const sandbox::CgroupUsage u = sandbox::read_cgroup_usage(directories);
  return std::to_string(u.cpu_user_us.value_or(-1)) + " " + std::to_string(u.cpu_system_us.value_or(-1)) + " " +
         std::to_string(u.memory_peak_bytes.value_or(-1));
}

bool read_request(sandbox::SandboxConfig& box, sandbox::SpawnSpec& spec) {
  uint32_t size = 0;
  if (!read_exact(kControl, reinterpret_cast<char*>(&size), sizeof size) || size > kMaxRequestBytes) return false;
  std::string body(size, '\0');
  if (!read_exact(kControl, body.data(), body.size())) return false;
  sandbox::WireReader r(body);
  return sandbox::decode_sandbox_config(r, box) && sandbox::decode_spawn_spec(r, spec) && r.ok() && r.at_end();
}

// The job's stdout and stderr stay with the job alone: the runner sees their EOF when it ends.
void let_go_of_output() {
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) return;
  dup3(null, STDOUT_FILENO, 0);
  dup3(null, STDERR_FILENO, 0);
  ::close(null);
}

std::string steps_line(const sandbox::SpawnTimes& t) {
  std::string line = "steps";
  for (uint64_t ns : {t.received_ns, t.planned_ns, t.cloned_ns, t.child.started, t.child.mounted, t.child.confined,
                      t.child.ready}) {
    line += " " + std::to_string(ns);
  }
  return line;
}

}  // namespace

int main() {
  sandbox::SandboxConfig box;
  sandbox::SpawnSpec spec;
  sandbox::SpawnTimes times;
  if (!read_request(box, spec)) give_up("motor-unit-entry: no well-formed request on its stdin");
  times.received_ns = sandbox::monotonic_ns();
  if (box.network) give_up("motor-unit-entry: an outbound job needs the runner's egress namespace");
  if (!box.own_user_namespace) {
    give_up("motor-unit-entry: holding no capability, it builds the sandbox only in a user namespace of its own");
  }
  const OwnCgroups cgroups = own_cgroups();
  answer("pid " + std::to_string(getpid()));
  if (!cgroups.unified.empty()) answer("events " + cgroups.unified);
  answer("cgroup " + cgroups.memory);  // the runner sets the unit's limits while this plans
  auto plan = sandbox::plan_sandbox(box);
  if (!plan) give_up("the sandbox cannot be built: " + plan.error().message);
  const sandbox::ChildHooks hooks = sandbox::make_child_hooks(*plan);
  times.planned_ns = sandbox::monotonic_ns();
  await_runner_limits();
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) give_up(std::string("opening /dev/null: ") + std::strerror(errno));
  sandbox::PassedCgroup cgroup;  // the unit's, the entry's own: the job inherits it at clone3
  spec.stdin_fd = dev_null.get();
  spec.stdout_fd = STDOUT_FILENO;
  spec.stderr_fd = STDERR_FILENO;
  spec.cgroup = &cgroup;
  spec.hooks = &hooks;
  // As the job starter does: no copy of this process's memory, and the child's stamps seen here.
  spec.share_memory_until_exec = true;
  auto spawned = sandbox::spawn_job(spec);
  if (!spawned) give_up(spawned.error().message);
  times.cloned_ns = sandbox::monotonic_ns();
  if (hooks.stamps) times.child = *hooks.stamps;
  let_go_of_output();
  dev_null.reset();

  // EOF with nothing: exec'd. Otherwise the child names the step that failed.
  std::string setup;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(spawned->setup_status.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    setup.append(buf, static_cast<size_t>(n));
  }
  answer(steps_line(times));
  answer(setup.empty() ? "setup" : "setup " + setup);

  pollfd exit_seen{spawned->pidfd.get(), POLLIN, 0};
  while (poll(&exit_seen, 1, -1) < 0 && errno == EINTR) {
  }
  const int init_signal = sandbox::read_init_report(spawned->pid).signal;  // before the reap frees the pid
  auto status = sandbox::reap_pidfd(spawned->pidfd.get());
  if (!status) give_up("waiting for the job: " + status.error().message);
  int wait_status = *status;
  // As the direct backend reports it: the command's signal, not motor-init's 128+N.
  if (init_signal && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 128 + init_signal) wait_status = init_signal;
  answer("exited " + std::to_string(wait_status) + " " + std::to_string(oom_kills(cgroups.memory)) + " " +
         usage_fields(cgroups.directories));
  return 0;
}
