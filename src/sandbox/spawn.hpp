// Starts one job process: clone3 with a pidfd, straight into the job's cgroup, stdio on the
// given pipes, running as the job account. The namespace sandbox plugs in through ChildHooks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/cgroup.hpp"

namespace motor::sandbox {

// What the namespace sandbox adds (src/sandbox/, issue 3). Each hook runs in the child, in this
// order, and returns 0 or an errno after naming the failing step in `stage` (<= 120 bytes).
// The child is single-threaded and a copy of the runner: hooks must not touch loop state.
// When the child reached each step of its set-up (CLOCK_MONOTONIC ns, 0: not reached). The child
// writes them; the caller sees them only when the child shares its memory until exec
// (SpawnSpec::share_memory_until_exec, the job starter's way), else they stay 0.
struct ChildStamps {
  uint64_t started = 0;     // run_child began (clone3 done: the namespaces exist)
  uint64_t mounted = 0;     // the root built and pivoted (apply_mounts)
  uint64_t confined = 0;    // before_credentials done (hostname, loopback, bounding set)
  uint64_t ready = 0;       // the account switched, capabilities and seccomp done: exec next
};

struct ChildHooks {
  uint64_t clone_flags = 0;  // CLONE_NEW* flags added to clone3
  // Where the child stamps its steps (may be null); make_child_hooks allocates one.
  std::shared_ptr<ChildStamps> stamps;
  // >= 0: the child execs this fd (execveat AT_EMPTY_PATH) instead of SpawnSpec::executable, which
  // then only names it in errors (the sandbox's motor-init, which has no path in the job's root).
  int exec_fd = -1;
  // The child is in a user namespace of its own with its ids mapped (user_namespace.hpp): its
  // groups cannot be set there (setgroups is denied) and were checked when it was planned.
  bool own_user_namespace = false;
  // >= 0: a socket on which the child, first thing, sends an fd of its own mount namespace
  // (SCM_RIGHTS). A sandbox built ahead (late_binds.hpp) is entered through it later: setns on a
  // namespace fd needs CAP_SYS_ADMIN and CAP_SYS_CHROOT, where one through a pidfd also passes a
  // ptrace access check (CAP_SYS_PTRACE: motor-init is non-dumpable and not the caller's uid).
  int mount_ns_report_fd = -1;
  // As root, after stdio and cgroup attach: mounts, pivot_root, hostname, loopback, bounding set.
  std::function<int(const char*& stage)> before_credentials;
  // As the job account, just before exec: no_new_privs, capabilities, seccomp.
  std::function<int(const char*& stage)> after_credentials;
};

// A cgroup to be made: its name under the driver's parent and its limits (CgroupDriver::create).
struct CgroupRequest {
  std::string name;
  CgroupLimits limits;
};

struct SpawnSpec {
  std::string executable;              // absolute path
  std::vector<std::string> argv;       // argv[0] included
  std::vector<std::string> env;        // "NAME=value"; nothing of the runner's own environment
  std::string cwd;                     // absolute path, entered after the hooks (inside the root)
  uid_t uid = 0;
  gid_t gid = 0;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  JobCgroup* cgroup = nullptr;         // required, unless the starter makes it (make_cgroup)
  // The job starter makes this cgroup itself, in its own process, and spawns into it (`cgroup`
  // is then null): the mkdirs and limit files stay off the runner's loop. The caller takes it by
  // name (CgroupDriver::known) once the starter has answered (Starter::makes_cgroups).
  const CgroupRequest* make_cgroup = nullptr;
  const ChildHooks* hooks = nullptr;   // null: no namespaces
  // CLONE_PARENT: the job becomes a child of the caller's parent. The job starter (a helper
  // process of the runner) sets it so the runner itself waits on the job's pidfd.
  bool child_of_callers_parent = false;
  // CLONE_VM | CLONE_VFORK: the child runs on a stack of its own in the caller's memory until
  // it execs, so nothing is copied (no page tables, no copy-on-write faults on either side);
  // the caller is suspended until then. For the job starter only, never for the runner's loop.
  bool share_memory_until_exec = false;
  // PR_SET_PDEATHSIG (SIGKILL) after the switch to the job account: the child dies with the
  // process that spawned it (motor-workspace-sandbox's sandbox dies with the helper).
  bool die_with_parent = false;
};

// When the steps of a spawn happened (CLOCK_MONOTONIC ns, uv_hrtime's clock; 0: not known), for
// the runner's start steps (runner/start_steps.hpp). Through the job starter: the request read,
// the sandbox planned, and clone3 returned (CLONE_VFORK: motor-init has exec'd by then).
struct SpawnTimes {
  uint64_t received_ns = 0, planned_ns = 0, cloned_ns = 0;
  ChildStamps child;  // inside the clone, where the child shared the caller's memory
};

struct SpawnedProcess {
  pid_t pid = -1;
  SpawnTimes times;
  UniqueFd pidfd;
  // Close-on-exec pipe: EOF with no data = the command was exec'd; otherwise the child wrote
  // "stage: strerror" and exited 127 before the command ran.
  UniqueFd setup_status;
  // The child's mount namespace, when ChildHooks::mount_ns_report_fd asked for it.
  UniqueFd mount_ns;
};

Expected<SpawnedProcess> spawn_job(const SpawnSpec& spec);

// CLOCK_MONOTONIC in ns (uv_hrtime's clock): SpawnTimes, ChildStamps. Through the vDSO, so a
// child may call it before exec.
uint64_t monotonic_ns();

// The mount namespace fd a child sent on ChildHooks::mount_ns_report_fd (this end of its socket
// pair). The child's end is close-on-exec: once the caller has closed its own copy, this never
// waits past the child's exec or death.
Expected<UniqueFd> receive_mount_namespace(int sock);

// Reaps a child whose pidfd became readable. Returns the wait status (as from waitpid).
Expected<int> reap_pidfd(int pidfd);

}  // namespace motor::sandbox
