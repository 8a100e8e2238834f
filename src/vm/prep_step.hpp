// Dependency preparation of a VM job (issue 8; docs/windows-jobs.md "Dependency preparation"):
// before the VM's disks are made, the configured prepare command (`cargo vendor` for a Cargo
// project) runs as a Linux sandbox job of its own — the job sandbox of src/sandbox (empty root,
// every capability dropped, seccomp, motor-init as PID 1) in a cgroup with memory, pids and cpuset
// limits — as `motor-prep`, never as the job account:
//
//   /workspace   the job's workspace, read-only and idmapped (motor-job's files shown as
//                motor-prep's: the workspace stays 0700, and the prep cannot write it)
//   /prep-out    $MOTOR_PREP_OUT: an empty tmpfs of `max_bytes`, mounted by the runner on the
//                host at `output_dir` (inside the VM job's directory) and owned by motor-prep;
//                a job (motor-job) can neither reach it nor plant anything in it
//   network      the outbound jobs' filtered egress when the runner has outbound_network on,
//                else loopback only
//
// Its output (stdout and stderr together) is streamed, bounded, as valid UTF-8; a non-zero
// exit, a signal or the deadline fails the step. The result is what the tmpfs holds; the VM job
// puts it onto the transfer disk and then unmounts it.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/job_network.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "vm/confined_child.hpp"
#include "vm/qga_protocol.hpp"

namespace motor::vm {

// Where the prepare command finds the workspace and writes its result, inside its sandbox.
inline constexpr const char* kPrepWorkspaceInSandbox = "/workspace";
inline constexpr const char* kPrepOutputInSandbox = "/prep-out";
// Where the result appears at the root of the transfer disk (and of the guest's workspace copy).
inline constexpr const char* kPrepResultOnTransferDisk = ".motor-prep";

struct PrepSpec {
  std::string command;                // run as /bin/sh -c COMMAND
  std::string workspace_dir;          // host path of the job's workspace
  std::string output_dir;             // host path: the tmpfs for the result is mounted here
  int64_t max_bytes = int64_t{512} << 20;
  uint64_t timeout_ms = 600000;
  sandbox::Account account;           // motor-prep
  sandbox::Account workspace_owner;   // motor-job: its files are shown as `account`'s
  std::string init_path;              // motor-init
  std::string cgroup_name;            // unique under the runner's cgroup parent
  sandbox::CgroupLimits limits;
  std::vector<std::string> read_only_paths;      // shared caches: read-only at their own paths
  std::optional<sandbox::JobNetworkPlan> network;
  uint64_t tmp_bytes = uint64_t{1} << 30;
  int64_t max_output_bytes = int64_t{1} << 20;   // streamed output; the rest is dropped with a note
};

// The result's tmpfs: mounted on the host at `dir` (which must exist), nosuid, nodev, noexec,
// owned by `owner`, mode 0700, at most `max_bytes`. Removed with unmount_prep_output (lazily:
// a reader still inside it keeps it until it leaves).
Status mount_prep_output(const std::string& dir, int64_t max_bytes, const sandbox::Account& owner);
Status unmount_prep_output(const std::string& dir);

// The tree a transfer disk with a preparation result is made from, without copying a byte: in
// the mke2fs sandbox a directory `stage` holds each top-level entry of the workspace (a
// read-only bind each; a symlink recreated with its text) and the result at .motor-prep (a
// read-only bind, idmapped from `prep_owner` to `reader`, the account mke2fs runs as). A
// workspace entry named .motor-prep is left out; a workspace root of more than 4096 entries,
// or holding a fifo, socket or device, is refused.
struct TransferStage {
  std::vector<sandbox::BindMount> read_only;
  std::vector<std::pair<std::string, std::string>> symlinks;
};
Expected<TransferStage> stage_transfer_tree(const std::string& stage, const std::string& workspace_dir,
                                            const std::string& prep_dir, const sandbox::Account& prep_owner,
                                            const sandbox::Account& reader);

class PrepStep {
 public:
  using Output = std::function<void(std::string_view)>;  // valid UTF-8
  using Done = std::function<void(Status)>;               // runs once; the step may be destroyed after
  static Expected<std::unique_ptr<PrepStep>> start(uv_loop_t* loop, sandbox::CgroupDriver& cgroups,
                                                   sandbox::Starter& starter, const PrepSpec& spec, Output output, Done done);
  // Unfinished: kills what runs and removes its cgroup (Done is not called).
  ~PrepStep() { stop(); }
  // The same now; the destructor then has nothing left to do.
  void stop();
  // Kills what runs (Done and Output are not called any more) and keeps the cgroup, so that
  // processes_gone() tells when the kill has taken effect (cgroup.kill only queues the signals).
  void kill();
  // Nothing of the command is left: its cgroup lists no process (or is gone, or unreadable: the
  // reaper that removes it kills what is left).
  bool processes_gone() const;
  PrepStep(const PrepStep&) = delete;
  PrepStep& operator=(const PrepStep&) = delete;

 private:
  PrepStep() = default;
  void exited(Expected<sandbox::SandboxedExit> exit);
  void remove_cgroup();

  // motor-init, PID 1 of the step's PID namespace: killing it (deadline) ends everything in it.
  ConfinedChild confined_;
  Utf8Sanitizer utf8_;
  uint64_t timeout_ms_ = 0;
  Output output_;
  Done done_;
};

}  // namespace motor::vm
