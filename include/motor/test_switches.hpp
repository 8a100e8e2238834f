// Test-only switches: weaken exactly one control, or allow one test destination, so a test can
// show that the attack the control stops GETS THROUGH without it.
//
// Only motor-runner-testing (the same main.cpp compiled with MOTOR_TESTING) fills these in, from
// `--test-*` command-line flags. motor-runner refuses every `--test-*` flag, and no config key
// reaches them, so in a runner an operator installs they are always empty.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace motor {

// Every control a test may weaken, by the name `--test-weaken=NAME` takes. One entry per control;
// the code that applies the control checks control_weakened("NAME") at the point it applies it.
// docs/server-gate.md ("Weakened controls") says what each weakening does and which gate attack
// it turns GOT THROUGH.
inline constexpr std::array<std::string_view, 40> kWeakenableControls = {
    "empty-root",          // runner.cpp: host /root, /etc/shadow and the state dir bound into the job
    "readonly-root",       // mounts.cpp: the job's root tmpfs is left writable
    "readonly-toolchain",  // sandbox_plan.cpp: toolchain paths bound writable
    "readonly-caches",     // runner.cpp: shared caches bound writable
    "no-sys",              // sandbox_plan.cpp: the host's /sys bound into the job
    "fresh-proc",          // proc.cpp: the host's /proc bound instead of a fresh one
    "pid-namespace",       // namespaces.cpp: no CLONE_NEWPID
    "network-namespace",   // namespaces.cpp: no CLONE_NEWNET
    "uts-namespace",       // namespaces.cpp: no CLONE_NEWUTS (and so no hostname is set)
    "cgroup-namespace",    // namespaces.cpp: no CLONE_NEWCGROUP
    "ipc-namespace",       // namespaces.cpp: no CLONE_NEWIPC
    "capabilities",        // capabilities.cpp: bounding set kept, sets not emptied
    "no-new-privs",        // capabilities.cpp: no PR_SET_NO_NEW_PRIVS (seccomp loaded as root)
    "nosuid",              // sandbox_plan.cpp: the workspace bound without nosuid
    "job-account",         // spawn.cpp: no switch to the job account (uid 0, no capabilities)
    "seccomp",             // sandbox_plan.cpp: no filter loaded
    "seccomp-keyring",     // seccomp_policy.cpp: the filter without add_key/request_key/keyctl
    "seccomp-ptrace",      // seccomp_policy.cpp: ... without ptrace, process_vm_*, pidfd_getfd
    "seccomp-namespaces",  // seccomp_policy.cpp: ... without unshare/setns/clone flags/clone3
    "seccomp-mount",       // seccomp_policy.cpp: ... without the mount calls
    "seccomp-tiocsti",     // seccomp_policy.cpp: ... without the ioctl rule
    "seccomp-vsock",       // seccomp_policy.cpp: ... without the AF_VSOCK socket rule
    "seccomp-uevent",      // seccomp_policy.cpp: ... without the NETLINK_KOBJECT_UEVENT socket rule
    "init-nondumpable",    // sandbox_plan.cpp: motor-init stays dumpable (/proc/1/mem writable by the job)
    "workspace-names",     // workspace_names.cpp, sandbox_plan.cpp: workspaces at <caller>/<key>, motor-init bound from its host path
    "pts-max",             // devices.cpp: the job's devpts without max=
    "proc-masks",          // proc.cpp: /proc/cmdline, boot_id, key-users, config.gz not masked
    "socket-buffers",      // cgroup_v1.cpp: no memory.kmem.tcp.limit_in_bytes (socket buffers uncharged)
    "cwd-beneath",         // runner.cpp: --cwd checked with a plain stat() on the host, following symlinks
    "scan-masks",          // workspaces.cpp: the scan's helper does not mask FIFO/device .gitignore files
    "helper-cgroup",       // workspace_requests.cpp: workspace helpers run in no cgroup of their own
    "env-filter",          // env_filter.cpp: every requested variable forwarded
    "memory-limit",        // job.cpp: no memory limit on the job's cgroup
    "pids-limit",          // job.cpp: no pids limit on the job's cgroup
    "cpuset",              // job.cpp: the cpuset is the parent's, not the claim
    "cgroup-kill",         // job.cpp: a deadline or exit kills only the main process, not the cgroup
    // Outbound network (issue 9); their rows are in runner_network_test.cpp (needs the test uplink).
    "outbound-ranges",      // netpolicy.cpp: no drop rule for the blocked ranges
    "outbound-host",        // netpolicy.cpp: no drop rule for the host's addresses and gateway
    "outbound-ipv6",        // job_network.cpp: the job's namespace keeps IPv6 (sysctls not written)
    "outbound-dns-filter",  // resolver.cpp: answers keep the addresses the policy drops
};

// One of kWeakenableControls. A name written in the code is checked when it is compiled
// (Control{"seccomp-mount"}, or control_weakened("seccomp-mount")): a misspelt control is a
// compile error, not a weakening that silently never happens. A name from the command line goes
// through parse_control, once, and an unknown one is refused there.
class Control {
 public:
  consteval Control(const char* name) : index_(index_of(name)) {}  // NOLINT: literals convert
  static constexpr std::optional<Control> parse(std::string_view name) {
    for (std::size_t i = 0; i < kWeakenableControls.size(); ++i) {
      if (kWeakenableControls[i] == name) return Control(i);
    }
    return std::nullopt;
  }
  constexpr std::string_view name() const { return kWeakenableControls[index_]; }
  constexpr bool operator==(const Control&) const = default;

 private:
  constexpr explicit Control(std::size_t index) : index_(index) {}
  static consteval std::size_t index_of(std::string_view name) {
    for (std::size_t i = 0; i < kWeakenableControls.size(); ++i) {
      if (kWeakenableControls[i] == name) return i;
    }
    throw "not a control in kWeakenableControls";  // in a consteval call: a compile error
  }
  std::size_t index_;
};

inline bool is_weakenable_control(std::string_view control) { return Control::parse(control).has_value(); }

struct TestSwitches {
  std::vector<Control> weakened;                  // --test-weaken=NAME (repeatable)
  std::vector<std::string> allowed_destinations;  // --test-allow-destination=CIDR (repeatable)
  // --test-slow-state-save=MS: the state writer waits this long before each save, as a slow
  // disk would, so a test can act inside the window before `accepted` goes out.
  unsigned state_save_delay_ms = 0;
};

inline TestSwitches& test_switches() {
  static TestSwitches switches;
  return switches;
}

inline bool control_weakened(Control control) {
  const auto& w = test_switches().weakened;
  return std::find(w.begin(), w.end(), control) != w.end();
}

// The weakened controls' names, in the order they were given.
inline std::vector<std::string> weakened_control_names() {
  std::vector<std::string> out;
  for (const Control c : test_switches().weakened) out.emplace_back(c.name());
  return out;
}

}  // namespace motor
