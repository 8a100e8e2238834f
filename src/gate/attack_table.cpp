// The gate's attacks, one row each (attacks.hpp): what it tries, the control it measures, its
// probe (src/gate/probes/, embedded as probes::<name>), how its job is asked for, and how its
// result is judged: by the probe's result lines (`expects`) or by the attack's own steps
// (attack_steps.hpp) where the host's side is evidence too. Adding an attack is a probe file and
// a row here (docs/server-gate.md). The order is the report's.
#include <unistd.h>

#include "gate/attack_steps.hpp"
#include "gate/probes.hpp"

namespace motor::gate {
namespace {

constexpr std::string_view kEmptyRoot = "empty root (tmpfs root, pivot_root, old root detached)";
const std::vector<std::string> kNoAccess = {"EACCES", "EROFS", "EPERM"};
const std::vector<std::string> kNoSys = {"ENOENT", "EROFS"};
const std::string kZero = "0000000000000000";
const std::string kRead0 = "OK (read 0 bytes)";

const std::vector<Attack> kAttacks = {
    // --- the empty root: host files are absent, not just unreadable ------------------------------
    {.id = "read-shadow", .control = kEmptyRoot, .description = "read the host's /etc/shadow",
     .probe = &probes::read_shadow, .expects = {{"read /etc/shadow", {"ENOENT"}}}},
    {.id = "read-root-home", .control = kEmptyRoot, .description = "list /root", .probe = &probes::read_root_home,
     .expects = {{"list /root", {"ENOENT"}}}},
    {.id = "read-state-dir", .control = kEmptyRoot,
     .description = "read and write the runner's state directory, its job table (state.db) and socket",
     .probe = &probes::read_state_dir,
     .expects = {{"stat the state dir", {"ENOENT"}}, {"read state.db", {"ENOENT"}}, {"list jobs/", {"ENOENT"}},
                 {"create a file in the state dir", {"ENOENT"}}, {"stat the socket", {"ENOENT"}}},
     .values = state_dir_values},
    {.id = "other-caller-workspace", .control = "only the job's own workspace is bound (empty root)",
     .description = "read a file in another caller's workspace (made by a job of caller gate-other)",
     .probe = &probes::other_caller_workspace, .steps = other_caller},
    {.id = "untrusted-unscreened-job", .control = "change screen: an untrusted run needs a workspace whose change passed it",
     .description = "an untrusted run on a workspace whose change was never screened writes a canary",
     .probe = &probes::untrusted_canary, .steps = unscreened_untrusted_job},
    {.id = "untrusted-code-change",
     .control = "change screen: an untrusted prepare of a code change is refused before the checkout",
     .description = "prepare an untrusted workspace whose change adds build.rs, then run an untrusted job in it",
     .probe = &probes::untrusted_canary, .steps = screened_code_change},
    // --- read-only mounts ------------------------------------------------------------------------
    {.id = "write-usr", .control = "toolchains bound read-only", .description = "create files in /usr and /usr/bin",
     .probe = &probes::write_usr, .expects = {{"create in /usr", {"EROFS"}}, {"create in /usr/bin", {"EROFS"}}}},
    {.id = "write-etc", .control = "root (and /etc) remounted read-only",
     .description = "create files in /etc and a host /etc directory bound into it", .probe = &probes::write_etc,
     .expects = {{"create in /etc", {"EROFS"}}, {"create in the bound /etc directory", {"EROFS"}}},
     .info = {"bound /etc directory"}},
    {.id = "write-root", .control = "root remounted read-only", .description = "create a file in /",
     .probe = &probes::write_root, .expects = {{"create in /", {"EROFS"}}}},
    {.id = "cwd-oracle", .control = "--cwd resolved beneath the workspace without symlinks (openat2)",
     .description = "plant symlinks to an existing and a missing host directory and ask for each as the cwd",
     .probe = &probes::cwd_oracle, .steps = cwd_oracle},
    {.id = "fs-dotdot", .control = "workspace bound alone; read-only root",
     .description = "create files outside the workspace through ..", .probe = &probes::fs_dotdot, .steps = dotdot},
    {.id = "fs-symlink", .control = "only the job's own workspace is bound (empty root)",
     .description = "follow symlinks planted in the workspace to a host directory and to /etc/shadow",
     .probe = &probes::fs_symlink, .steps = symlink_out},
    {.id = "fs-hardlink", .control = "only the job's own workspace is bound; other mounts are separate filesystems",
     .description = "hard-link a host file (world-writable, beside the workspace), /usr/bin/id and /etc/passwd into the "
                    "workspace",
     .probe = &probes::fs_hardlink, .steps = hardlink},
    {.id = "write-caches", .control = "shared caches under a private layer (read-only in effect)",
     .description = "create a file in each shared cache (cache_paths)", .needs = Needs::kCaches,
     .probe = &probes::write_caches, .steps = write_caches},
    // --- devices, processes, network ---------------------------------------------------------------
    {.id = "mknod", .control = "no capabilities (CAP_MKNOD); nodev mounts",
     .description = "create a device node (/dev/mem's 1:1)", .probe = &probes::mknod,
     .expects = {{"mknod in /workspace", {"EPERM"}}, {"mknod in /tmp", {"EPERM"}}}},
    {.id = "proc-host", .control = "own PID namespace (fresh /proc)", .description = "see host processes in /proc",
     .probe = &probes::proc_host, .info = {"processes the job sees"}, .steps = host_processes},
    {.id = "runner-memory", .control = "own PID namespace; seccomp (process_vm_readv)",
     .description = "read the runner's memory through /proc", .needs = Needs::kX86_64, .probe = &probes::runner_memory,
     .steps = runner_memory},
    {.id = "net-host-loopback", .control = "own network namespace (loopback only)",
     .description = "connect to a TCP listener the gate opened on the host's 127.0.0.1",
     .probe = &probes::net_host_loopback, .steps = host_loopback},
    {.id = "net-outbound", .control = "own network namespace (loopback only)",
     .description = "connect to 192.0.2.1:80 and [2001:db8::1]:80, send UDP to 192.0.2.1:53",
     .probe = &probes::net_outbound,
     .expects = {{"tcp 192.0.2.1:80", {"ENETUNREACH"}},
                 {"tcp [2001:db8::1]:80", {"ENETUNREACH", "EADDRNOTAVAIL", "EAFNOSUPPORT"}},
                 {"udp 192.0.2.1:53", {"ENETUNREACH"}}}},
    {.id = "dns", .control = "own network namespace (loopback only, no resolver)",
     .description = "resolve a name, and query the host's own resolver over UDP and TCP", .probe = &probes::dns,
     .info = {"read /etc/resolv.conf"}, .steps = dns},
    // --- outbound network (issue 9) ------------------------------------------------------------------
    {.id = "net-outbound-ranges", .control = "outbound job: egress ruleset drops every blocked range",
     .description = "connect from an outbound job to one address in each private, shared, link-local (metadata), "
                    "documentation and benchmarking range",
     .needs = Needs::kOutbound, .probe = &probes::net_outbound_connect, .job = {.network = "outbound"},
     .steps = outbound_ranges},
    {.id = "net-outbound-host", .control = "outbound job: egress ruleset drops the host's addresses and gateway",
     .description = "connect from an outbound job to every address of the host (the uplink namespace) and its gateway",
     .needs = Needs::kOutbound, .probe = &probes::net_outbound_connect, .job = {.network = "outbound"},
     .steps = outbound_host},
    {.id = "net-outbound-ipv6", .control = "outbound job: no IPv6 (sysctls in the job's namespace, ruleset drops IPv6)",
     .description = "list IPv6 addresses, connect over IPv6 to ::1 and 2001:db8::1", .needs = Needs::kOutbound,
     .probe = &probes::net_outbound_ipv6, .job = {.network = "outbound"},
     .expects = {{"ipv6 addresses", {"OK 0"}},
                 {"udp connect [::1]:80", {"EADDRNOTAVAIL", "ENETUNREACH"}},
                 {"udp connect [2001:db8::1]:80", {"ENETUNREACH", "EADDRNOTAVAIL"}}}},
    {.id = "net-outbound-dns-private", .control = "outbound job: the resolver removes addresses the policy drops",
     .description = "resolve names the upstream resolver answers with private or link-local addresses",
     .needs = Needs::kOutbound, .probe = &probes::net_outbound_dns_private, .job = {.network = "outbound"},
     .steps = outbound_dns_private},
    // --- privileges -----------------------------------------------------------------------------
    {.id = "capabilities", .control = "every capability set emptied", .description = "read the job's capability sets",
     .probe = &probes::capabilities,
     .expects = {{"CapInh", {kZero}}, {"CapPrm", {kZero}}, {"CapEff", {kZero}}, {"CapBnd", {kZero}}, {"CapAmb", {kZero}}}},
    {.id = "no-new-privs", .control = "no_new_privs", .description = "read NoNewPrivs", .probe = &probes::no_new_privs,
     .expects = {{"NoNewPrivs", {"1"}}}},
    {.id = "setuid", .control = "no_new_privs + nosuid workspace",
     .description = "run a setuid-root copy of /usr/bin/id the gate planted in the workspace", .needs = Needs::kRoot,
     .probe = &probes::setuid, .info = {"id"}, .steps = setuid_binary},
    // --- seccomp --------------------------------------------------------------------------------
    {.id = "seccomp-mode", .control = "seccomp filter loaded", .description = "read the job's Seccomp mode",
     .probe = &probes::seccomp_mode, .expects = {{"Seccomp", {"2"}}}},
    {.id = "seccomp-calls", .control = "seccomp filter (the reviewed table)",
     .description = "call unshare, mount, keyctl, bpf, ptrace and the rest of the table with harmless arguments",
     .needs = Needs::kX86_64, .probe = &probes::seccomp_calls, .expects = seccomp_expects(),
     .values = seccomp_tries_values},
    {.id = "ptrace-init", .control = "seccomp: ptrace and process_vm_* refused",
     .description = "ptrace the job's own init (PID 1)", .needs = Needs::kX86_64, .probe = &probes::ptrace_init,
     .expects = {{"PTRACE_ATTACH 1", {"EPERM"}}, {"PTRACE_SEIZE 1", {"EPERM"}}, {"process_vm_readv 1", {"EPERM"}}}},
    {.id = "keyring", .control = "seccomp: keyring calls refused", .description = "use the kernel keyring",
     .needs = Needs::kX86_64, .probe = &probes::keyring,
     .expects = {{"keyctl get session keyring", {"EPERM"}}, {"add_key user", {"EPERM"}}, {"request_key user", {"EPERM"}}}},
    {.id = "user-namespace", .control = "seccomp: unshare/clone with namespace flags refused",
     .description = "create a new user namespace", .needs = Needs::kX86_64, .probe = &probes::user_namespace,
     .expects = {{"unshare(CLONE_NEWUSER)", {"EPERM"}}, {"unshare --user --map-root-user", {"failed*"}}}},
    {.id = "mount", .control = "seccomp: mount calls refused; no CAP_SYS_ADMIN", .description = "mount a tmpfs",
     .needs = Needs::kX86_64, .probe = &probes::mount,
     .expects = {{"mount tmpfs on /tmp", {"EPERM"}}, {"mount(NULL, NULL)", {"EPERM"}}, {"fsopen tmpfs", {"EPERM"}},
                 {"mount(8)", {"failed*"}}}},
    {.id = "tiocsti", .control = "seccomp: ioctl TIOCSTI refused",
     .description = "inject input into the job's own terminal (TIOCSTI)", .probe = &probes::tiocsti,
     .expects = {{"TIOCSTI on the controlling terminal", {"EPERM"}}}},
    {.id = "vsock", .control = "seccomp: AF_VSOCK sockets refused",
     .description = "create an AF_VSOCK socket (the host's vsock port space, outside the network namespace)",
     .needs = Needs::kX86_64, .probe = &probes::vsock, .expects = {{"socket(AF_VSOCK, SOCK_STREAM)", {"EPERM"}}}},
    {.id = "uevent-netlink", .control = "seccomp: NETLINK_KOBJECT_UEVENT sockets refused",
     .description = "open a netlink socket for the kernel's device events (host pids of processes starting VMs)",
     .needs = Needs::kX86_64, .probe = &probes::uevent_netlink,
     .expects = {{"socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)", {"EPERM"}},
                 {"socket(AF_NETLINK, NETLINK_ROUTE) (allowed)", {"OK"}}}},
    // motor-init is not dumpable: /proc/1/mem, environ and exe are closed to the job, which runs as
    // the same account (ptrace is refused by seccomp, /proc/PID/mem is not).
    {.id = "init-memory", .control = "motor-init non-dumpable (PR_SET_DUMPABLE 0)",
     .description = "open motor-init's memory for writing through /proc/1/mem", .probe = &probes::init_memory,
     .expects = {{"open /proc/1/mem for writing", {"EACCES"}}, {"read /proc/1/environ", {"EACCES"}},
                 {"readlink /proc/1/exe", {"EACCES"}}}},
    {.id = "pty-exhaust", .control = "the job's devpts instance has max=",
     .description = "open ptys until the kernel refuses (all instances share kernel.pty.max)",
     .probe = &probes::pty_exhaust, .expects = {{"the next ptmx open", {"ENOSPC"}}}, .info = {"ptys opened"},
     .values = pty_values},
    {.id = "proc-leaks", .control = "host facts in procfs masked (empty read-only files)",
     .description = "read the host's boot command line, boot id, key-users and kernel config",
     .probe = &probes::proc_leaks,
     .expects = {{"read /proc/cmdline", {kRead0}}, {"read /proc/sys/kernel/random/boot_id", {kRead0}},
                 {"read /proc/key-users", {kRead0}}, {"read /proc/config.gz", {kRead0, "ENOENT"}}}},
    {.id = "mount-view", .control = "opaque workspace directory names; motor-init exec'd from an fd, not bound",
     .description = "look for the caller's name, the workspace key and motor-init's host path in the job's mount tables",
     .probe = &probes::mount_view, .steps = mount_view},
    // --- the kernel's knobs -------------------------------------------------------------------------
    {.id = "hostname", .control = "own UTS namespace; no CAP_SYS_ADMIN", .description = "read and change the hostname",
     .probe = &probes::hostname, .expects = {{"sethostname", {"EPERM"}}, {"hostname(1)", {"failed*"}}},
     .info = {"nodename"}, .steps = hostname},
    {.id = "sysv-ipc", .control = "own IPC namespace",
     .description = "open a SysV message queue the gate made on the host (world-writable)", .needs = Needs::kX86_64,
     .probe = &probes::sysv_ipc, .expects = {{"msgget the host queue", {"ENOENT"}}}, .steps = sysv_ipc},
    {.id = "write-proc-sys", .control = "no root in the job (procfs permissions); no capabilities",
     .description = "open /proc/sys files and /proc/sysrq-trigger for writing", .probe = &probes::write_proc_sys,
     .expects = {{"open for writing /proc/sys/kernel/hostname", kNoAccess},
                 {"open for writing /proc/sys/kernel/core_pattern", kNoAccess},
                 {"open for writing /proc/sys/vm/drop_caches", kNoAccess},
                 {"open for writing /proc/sysrq-trigger", {"EACCES", "EROFS", "EPERM", "ENOENT"}}}},
    {.id = "write-sys", .control = "no /sys in the job", .description = "open /sys files for writing",
     .probe = &probes::write_sys,
     .expects = {{"open for writing /sys/kernel/mm/ksm/run", kNoSys},
                 {"open for writing /sys/kernel/uevent_helper", kNoSys},
                 {"open for writing /sys/power/state", kNoSys}}},
    {.id = "cgroup-files", .control = "no /sys; own cgroup namespace; no CAP_SYS_ADMIN",
     .description = "write the runner's cgroup files and mount a cgroup filesystem", .needs = Needs::kX86_64,
     .probe = &probes::cgroup_files, .steps = cgroup_files},
    // --- limits and lifetime ----------------------------------------------------------------------
    {.id = "env-canaries", .control = "environment filter (secret-named variables never cross)",
     .description = "pass GH_TOKEN, API_KEY, MY_SECRET_VALUE canaries in exec.run env; search env, /proc/1/environ, files",
     .probe = &probes::env_canaries, .steps = env_canaries},
    // /proc/1/environ is unreadable while motor-init is not dumpable; readable, it must not hold it.
    {.id = "ssh-auth-sock", .control = "environment filter (SSH_AUTH_SOCK never crosses)",
     .description = "pass SSH_AUTH_SOCK in exec.run env", .probe = &probes::ssh_auth_sock,
     .expects = {{"SSH_AUTH_SOCK in the environment", {"absent"}},
                 {"SSH_AUTH_SOCK in /proc/1/environ", {"absent", "unreadable (EACCES)"}},
                 {"SSH_AUTH_SOCK in /proc/self/environ", {"absent"}}},
     .steps = ssh_auth_sock},
    {.id = "memory-balloon", .control = "memory limit (memory.max / memory.limit_in_bytes + memsw)",
     .description = "fill 256 MiB of real anonymous memory in a job limited to 64M", .needs = Needs::kMemoryController,
     .probe = &probes::memory_balloon, .job = {.memory = "64M"}, .steps = memory_balloon},
    {.id = "socket-buffers",
     .control = "socket buffers charged to the job's memory (v1 memory.kmem.tcp.limit_in_bytes; v2 memory.max)",
     .description = "queue loopback TCP and UDP buffers nobody reads in a job limited to 64M",
     .needs = Needs::kMemoryController, .probe = &probes::socket_buffers, .job = {.memory = "64M"},
     .steps = socket_buffers},
    {.id = "scan-fifo", .control = "the scan's helper masks FIFO/device .gitignore files (git would block opening one)",
     .description = "leave a FIFO named .gitignore in an untracked folder for the runner's git status",
     .probe = &probes::scan_fifo, .steps = scan_fifo},
    {.id = "scan-memory", .control = "the scan runs in a cgroup charged the job's memory limit",
     .description = "plant 160 MiB of ignore patterns for the scan's git from a job limited to 64M",
     .needs = Needs::kMemoryController, .probe = &probes::scan_memory, .job = {.memory = "64M"}, .steps = scan_memory},
    {.id = "fork-bomb", .control = "pids limit (pids.max = pids_max)",
     .description = "create tasks until the kernel refuses, then fork once more", .needs = Needs::kPidsController,
     .probe = &probes::fork_bomb, .job = {.timeout_s = 120}, .steps = fork_bomb},
    {.id = "cpuset", .control = "CPUs pinned to the job's claim (cpuset)",
     .description = "ask for 1 CPU and read Cpus_allowed_list while exec.status shows the claim",
     .needs = Needs::kCpusetController, .probe = &probes::cpuset, .job = {.cpus = 1}, .steps = cpuset},
    {.id = "daemon", .control = "the job's PID namespace and cgroup end with the command",
     .description = "double-fork a setsid daemon that outlives the command", .probe = &probes::daemon,
     .steps = daemon_outlives},
    {.id = "timeout", .control = "deadline kills the job's whole cgroup",
     .description = "an infinite loop with a background child and a setsid'd daemon past a 2 s timeout",
     .probe = &probes::timeout, .job = {.timeout_s = 2}, .steps = timeout_loop},
};

std::optional<Verdict> host_lacks(bool have, const std::string& what) {
  if (have) return std::nullopt;
  return Verdict{Result::kSkipped, "this host has no " + what, true};
}

}  // namespace

const std::vector<Attack>& attack_catalogue() { return kAttacks; }

std::string needs_text(Needs needs) {
  switch (needs) {
    case Needs::kNothing: return "";
    case Needs::kX86_64: return "x86_64 syscall numbers";
    case Needs::kPidsController: return "pids controller";
    case Needs::kMemoryController: return "memory controller";
    case Needs::kCpusetController: return "cpuset controller";
    case Needs::kCaches: return "shared caches configured";
    case Needs::kOutbound: return "outbound_network = true";
    case Needs::kRoot: return "the gate running as root (to plant a setuid-root file)";
  }
  return "";
}

std::optional<Verdict> skip_reason(const Attack& attack, const AttackEnv& env) {
  switch (attack.needs) {
    case Needs::kNothing: return std::nullopt;
    case Needs::kX86_64:
      if (env.facts.machine == "x86_64") return std::nullopt;
      return Verdict{Result::kSkipped,
                     "the gate's syscall tries know x86_64 numbers only (this host: " + env.facts.machine + ")", true};
    case Needs::kPidsController: return host_lacks(env.facts.pids_controller, "pids cgroup controller");
    case Needs::kMemoryController: return host_lacks(env.facts.memory_controller, "memory cgroup controller");
    case Needs::kCpusetController: return host_lacks(env.facts.cpuset_controller, "cpuset cgroup controller");
    case Needs::kCaches:
      // A config without cache_paths gives no job a cache to write: a host-level skip.
      if (!env.config->cache_paths.empty()) return std::nullopt;
      return Verdict{Result::kSkipped, "no shared caches configured", true};
    case Needs::kOutbound:
      if (env.config && env.config->outbound_network) return std::nullopt;
      return Verdict{Result::kSkipped, "outbound_network is off: outbound jobs are refused (network_unsupported)", true};
    case Needs::kRoot:
      if (geteuid() == 0) return std::nullopt;
      return Verdict{Result::kSkipped, "the gate is not root and cannot plant a setuid-root binary", false};
  }
  return std::nullopt;
}

Verdict run_attack(const Attack& attack, AttackEnv& env) {
  if (attack.steps) return attack.steps(env, attack);
  return judge_lines(run_probe(env, attack, attack.values ? attack.values(env) : ""), attack.expects, attack.info);
}

}  // namespace motor::gate
