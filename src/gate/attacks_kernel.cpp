// Steps of the attacks on processes and the kernel's namespaces (attack_steps.hpp), and the values
// the plain probes read.
#include <sys/msg.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "gate/attack_steps.hpp"
#include "sandbox/devices.hpp"

namespace motor::gate {
namespace {

// More ptys than a job's devpts instance allows (sandbox/devices.hpp kJobPtyMax), fewer than the
// fd limit: the pty attack stops there when the limit is missing.
constexpr int kGatePtyTries = 192;
static_assert(kGatePtyTries > sandbox::kJobPtyMax);

// The seccomp tries: harmless calls whose result without the filter differs from the filter's
// EPERM wherever the kernel allows (bad pointers give EFAULT, bad fds EBADF, bad flags EINVAL).
// x86_64 numbers; the arguments are python tuples. One list for the probe and its judge.
struct SeccompTry {
  const char* name;
  int nr;
  const char* args;
  const char* stopped;
};
constexpr SeccompTry kSeccompTries[] = {
    {"add_key", 248, "(0, 0, 0, 0, 0)", "EPERM"}, {"request_key", 249, "(0, 0, 0, 0)", "EPERM"},
    {"keyctl", 250, "(-1, 0, 0, 0, 0)", "EPERM"}, {"bpf", 321, "(-1, 0, 0)", "EPERM"},
    {"perf_event_open", 298, "(0, 0, -1, -1, 0)", "EPERM"}, {"userfaultfd", 323, "(0xffffffff,)", "EPERM"},
    {"ptrace", 101, "(0x7fff, 0, 0, 0)", "EPERM"}, {"process_vm_readv", 310, "(0, 0, 0, 0, 0, -1)", "EPERM"},
    {"process_vm_writev", 311, "(0, 0, 0, 0, 0, -1)", "EPERM"}, {"pidfd_getfd", 438, "(-1, -1, 0)", "EPERM"},
    {"kcmp", 312, "(0, 0, -1, 0, 0)", "EPERM"}, {"modify_ldt", 154, "(0, 0, 0)", "EPERM"},
    {"mount", 165, "(0, 0, 0, 0, 0)", "EPERM"}, {"umount2", 166, "(0, 0xffffffff)", "EPERM"},
    {"pivot_root", 155, "(0, 0)", "EPERM"}, {"chroot", 161, "(0,)", "EPERM"},
    {"move_mount", 429, "(-1, 0, -1, 0, 0xffffffff)", "EPERM"}, {"open_tree", 428, "(-1, 0, 0xffffffff)", "EPERM"},
    {"fsopen", 430, "(0, 0xffffffff)", "EPERM"}, {"fspick", 433, "(-1, 0, 0xffffffff)", "EPERM"},
    {"mount_setattr", 442, "(-1, 0, 0xffffffff, 0, 0)", "EPERM"},
    {"unshare", 272, "(0x1000,)", "EPERM"}, {"setns", 308, "(-1, 0)", "EPERM"},
    {"clone(CLONE_NEWUSER)", 56, "(0x10000000 | 17, 0, 0, 0, 0)", "EPERM"},
    {"clone(CLONE_NEWNS)", 56, "(0x00020000 | 17, 0, 0, 0, 0)", "EPERM"},
    {"clone3", 435, "(0, 0)", "ENOSYS"},
    {"kexec_load", 246, "(0, 0, 0, 0xffffffff)", "EPERM"}, {"init_module", 175, "(0, 0, 0)", "EPERM"},
    {"finit_module", 313, "(-1, 0, 0xffffffff)", "EPERM"}, {"delete_module", 176, "(0, 0)", "EPERM"},
    {"open_by_handle_at", 304, "(-1, 0, 0)", "EPERM"}, {"swapon", 167, "(0, 0)", "EPERM"},
    {"reboot", 169, "(0, 0, 0, 0)", "EPERM"}, {"acct", 163, "(b'',)", "EPERM"}, {"quotactl", 179, "(0, 0, 0, 0)", "EPERM"},
    {"iopl", 172, "(4,)", "EPERM"}, {"ioperm", 173, "(65536, 1, 1)", "EPERM"},
    {"ioctl(TIOCSTI)", 16, "(-1, 0x5412, 0)", "EPERM"}, {"io_uring_setup", 425, "(0, 0)", "EPERM"},
    {"personality(PER_LINUX32)", 135, "(8,)", "EPERM"},
    {"getpid (allowed)", 39, "()", "OK"},
};

}  // namespace

std::string seccomp_tries_values(const AttackEnv&) {
  std::string list = "TRIES = [\n";
  for (const auto& t : kSeccompTries) list += fmt::format("    ({}, {}, {}),\n", py(t.name), t.nr, t.args);
  return list + "]\n";
}

std::vector<Expect> seccomp_expects() {
  std::vector<Expect> out;
  for (const auto& t : kSeccompTries) out.push_back({t.name, {t.stopped}});
  return out;
}

std::string state_dir_values(const AttackEnv& env) {
  return fmt::format("STATE = {}\nSOCK = {}\n", py(env.state_dir), py(env.socket_path));
}

std::string pty_values(const AttackEnv&) { return fmt::format("LIMIT = {}\n", kGatePtyTries); }

Verdict host_processes(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a, fmt::format("MK = {}\nHOSTPID = {}\n", py_split(env.host_marker), env.host_marker_pid));
  return judge_lines(r,
                     {{"host marker process", {"absent"}},
                      {"runner process", {"absent"}},
                      {fmt::format("stat /proc/{} (a host pid)", env.host_marker_pid), {"ENOENT"}}},
                     a.info);
}

Verdict runner_memory(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a, fmt::format("RPID = {}\n", env.runner_pid));
  return judge_lines(r, {{fmt::format("stat /proc/{} (the runner)", env.runner_pid), {"ENOENT"}},
                         {fmt::format("read /proc/{}/mem", env.runner_pid), {"ENOENT"}},
                         {"a runner process", {"absent"}},
                         {"process_vm_readv of the runner", {"EPERM"}}});
}

Verdict hostname(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a);
  const std::string now = host_name();
  if (now != env.host_hostname) return through("the host's hostname changed to " + now);
  Verdict v = judge_lines(r, a.expects, a.info);
  const auto got = parse_result_lines(r.out);
  if (v.result == Result::kStopped && got.count("nodename") && got.at("nodename") == env.host_hostname) {
    return through("the job sees the host's hostname " + env.host_hostname + ": it shares the host's UTS namespace");
  }
  return v;
}

Verdict sysv_ipc(AttackEnv& env, const Attack& a) {
  // A key of our own, the queue 0666 so that only the namespace can keep the job from it.
  const key_t key = static_cast<key_t>(0x6d740000 | (std::atoi(env.new_marker().c_str() + 6) & 0xffff));
  const int queue = msgget(key, IPC_CREAT | IPC_EXCL | 0666);
  if (queue < 0) return inconclusive(fmt::format("could not make a message queue with key {:#x}: {}", key, std::strerror(errno)));
  auto r = run_probe(env, a, fmt::format("KEY = {}\n", key));
  msgctl(queue, IPC_RMID, nullptr);
  return judge_lines(r, a.expects);
}

Verdict cgroup_files(AttackEnv& env, const Attack& a) {
  std::vector<std::string> paths;
  for (const auto& mnt : env.facts.cgroup_mounts) paths.push_back(mnt + "/" + env.cgroup_parent + "/cgroup.procs");
  if (paths.empty()) paths.push_back("/sys/fs/cgroup/cgroup.procs");
  auto r = run_probe(env, a, "PATHS = " + py_list(paths) + "\nPARENT = " + py_split(env.cgroup_parent) + "\n");
  std::vector<Expect> ex;
  for (const auto& p : paths) ex.push_back({"open for writing " + p, {"ENOENT"}});
  ex.push_back({"mount cgroup2", {"EPERM"}});
  ex.push_back({"host cgroup paths in /proc/self/cgroup", {"absent"}});
  return judge_lines(r, ex);
}

}  // namespace motor::gate
