// One VM job (DESIGN.md "A Windows job"), driven from the runner's loop:
//
//   transfer disk (mke2fs -d, confined)  ->  overlay (qemu-img, confined)  ->  domain created
//   paused (motor-vm-helper)  ->  QEMU's confinement checked and completed  ->  resumed  ->
//   guest agent synced  ->  guest-exec of the guest runner, its output files read with
//   guest-file-read (bounded per read, per tick and in total)  ->  exit status  ->  the guest's
//   listing of what the command changed, read bounded and validated (vm/guest_changes.hpp)  ->  domain
//   destroyed, QEMU gone, overlay and work directory deleted (the data disk stays).
//
// A kill (deadline, cancel, shutdown) at any point goes straight to the teardown. Every step
// that can take long runs in a child process; the loop only reads /proc and small files.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/uv_handle.hpp"
#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/starter.hpp"
#include "vm/disk_tool.hpp"
#include "vm/guest_changes.hpp"
#include "vm/helper_call.hpp"
#include "vm/prep_step.hpp"
#include "vm/qemu_confinement.hpp"
#include "vm/qemu_launcher.hpp"
#include "vm/qga_client.hpp"

namespace motor::vm {

struct VmJobSpec {
  std::string job_id;
  std::string domain_name;       // "motor-<job id>"
  std::string work_dir;          // per job: overlay, transfer disk, agent socket, XML; deleted after
  std::string libvirt_uri = "qemu:///system";
  std::string helper_path;       // motor-vm-helper
  // Who starts QEMU (qemu_launcher.hpp); empty: libvirt, through motor-vm-helper.
  std::function<std::unique_ptr<QemuLauncher>()> make_launcher;
  std::string init_path;         // motor-init (for the confined disk tools)
  // Starts the preparation and the disk tools (the runner's job starter); null: in process.
  sandbox::Starter* starter = nullptr;
  bool emulated = false;
  std::string sealed_image;
  std::string kernel, initrd, cmdline;  // direct kernel boot (test guest) or empty
  std::string data_disk;         // persistent per workspace; created (sparse) when missing
  int64_t data_disk_bytes = int64_t{8} << 30;
  std::string transfer_source;   // host directory for the transfer disk; empty = no transfer disk
  int64_t transfer_disk_bytes = int64_t{1} << 30;
  std::vector<int> cpus;
  int64_t memory_bytes = 0;
  int64_t hard_limit_bytes = 0;
  int64_t pids_max = 256;
  sandbox::Account qemu_account;  // motor-qemu
  sandbox::Account tool_account;  // reads transfer_source for mke2fs (the job account)
  std::string pids_cgroup;        // "<parent>-vm/<job id>" in the pids hierarchy
  std::string disk_cgroup;        // cgroup name (under the runner's parent) for the disk tools
  // The command, through the guest runner: RUNNER STDOUT_FILE STDERR_FILE CHANGES_FILE CWD ARGV...
  // (docs/windows-jobs.md "The guest runner").
  std::string guest_runner = "/motor/run";
  std::string guest_stdout = "/run/motor-job.out";
  std::string guest_stderr = "/run/motor-job.err";
  std::string guest_changes = "/run/motor-job.changes";
  std::string cwd;  // relative to the workspace copy, validated (workspace::relative_cwd); "" = its root
  std::vector<std::string> argv;
  std::vector<std::string> env;
  uint64_t agent_timeout_ms = 120000;
  uint64_t request_timeout_ms = 30000;
  // Output bounds: per read (each stream, each tick), tick period, total.
  int64_t read_chunk_bytes = 64 * 1024;
  uint64_t poll_ms = 100;
  int64_t max_output_bytes = int64_t{64} << 20;
  size_t max_message_bytes = 256 * 1024;
  // Dependency preparation before the disks are made (prep_step.hpp); its result goes onto the
  // transfer disk at .motor-prep/. Absent: none (vm_prepare_command is empty).
  std::optional<PrepSpec> prep;
};

struct VmPhaseTimes {
  uint64_t prepare_us = 0, disks_us = 0, domain_start_us = 0, agent_ready_us = 0, command_us = 0, teardown_us = 0;
};

struct VmOutcome {
  enum class Kind { kExit, kSignal, kRefused, kFailed, kKilled };
  Kind kind = Kind::kFailed;
  int64_t code = 0;           // exit code or signal
  std::string detail;         // why (refused / failed)
  std::string killed;         // "deadline" | "cancel" for kKilled
  bool output_truncated = false;
  VmPhaseTimes times;
  bool core_scheduling = false;
  // What the command changed in the workspace copy, from the guest's validated listing; nullopt
  // when there is none to believe, with the reason in changes_note.
  std::optional<std::vector<GuestChange>> changes;
  std::string changes_note;
};

class VmJobSink {
 public:
  virtual ~VmJobSink() = default;
  virtual void vm_command_started() = 0;
  // Valid UTF-8, at most read_chunk_bytes (+ a few) per call.
  virtual void vm_output(bool is_stderr, std::string_view text) = 0;
  // Everything is torn down. The VmJob may be destroyed from here on (not inside this call).
  virtual void vm_finished(const VmOutcome& outcome) = 0;
  virtual void vm_log(const std::string& line) = 0;
  // The dependency preparation's output (valid UTF-8, bounded), before the command starts.
  virtual void vm_prepare_output(std::string_view) {}
};

class VmJob {
 public:
  VmJob(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, VmJobSpec spec, VmJobSink& sink);
  ~VmJob();
  VmJob(const VmJob&) = delete;
  VmJob& operator=(const VmJob&) = delete;

  void start();
  // Deadline or cancel: destroy the domain (or stop what is being prepared) and report kKilled.
  void kill(const std::string& why);
  pid_t qemu_pid() const { return qemu_pid_; }
  bool finished() const { return finished_; }

 private:
  enum class Phase { kIdle, kPreparing, kDisks, kCreating, kResuming, kAgent, kRunning, kListing, kTearingDown, kDone };
  void prepare();
  // Unmounts and deletes the preparation's result (after the transfer disk, or at teardown).
  Status remove_prep_result();
  void make_transfer_disk();
  void make_overlay();
  void create_domain();
  void on_created(Expected<std::string> pid_text);
  std::unique_ptr<QemuLauncher> launcher() const;
  void resume();
  void connect_agent();
  void open_outputs();
  void exec_command();
  void tick();
  void read_stream(int index, std::function<void()> next);
  void check_status();
  void read_changes();
  void end(VmOutcome::Kind kind, int64_t code, std::string detail);
  void teardown();
  void wait_for_prep(bool domain_may_exist);
  void finish_teardown(bool domain_may_exist);
  void destroyed(Status s);
  void on_qemu_exit();
  void cleanup();
  bool stopping() const { return stop_requested_ || phase_ == Phase::kTearingDown || phase_ == Phase::kDone; }

  uv_loop_t* loop_;
  sandbox::CgroupDriver& cgroups_;
  sandbox::InProcessStarter in_process_;  // when the spec names no starter
  sandbox::Starter& starter() { return spec_.starter ? *spec_.starter : in_process_; }
  VmJobSpec spec_;
  VmJobSink& sink_;
  Phase phase_ = Phase::kIdle;
  bool stop_requested_ = false;
  bool finished_ = false;
  bool domain_created_ = false;
  VmOutcome outcome_;
  bool outcome_set_ = false;
  std::unique_ptr<PrepStep> prep_;
  bool prep_mounted_ = false;
  std::unique_ptr<DiskTool> disk_tool_;
  std::unique_ptr<QemuLauncher> launcher_;
  std::unique_ptr<QgaClient> agent_;
  QemuConfinement confinement_;
  pid_t qemu_pid_ = -1;
  UniqueFd qemu_pidfd_;
  reactor::UvHandle<uv_poll_t> qemu_poll_;
  reactor::UvHandle<uv_timer_t> tick_timer_;
  void arm_tick(uint64_t ms);
  reactor::UvHandle<uv_timer_t> exit_wait_timer_;
  reactor::UvHandle<uv_timer_t> prep_wait_timer_;  // teardown: until the killed prep's cgroup is empty
  int prep_wait_ticks_ = 0;
  bool prep_wait_domain_ = false;  // teardown's domain_may_exist, for when the wait ends
  bool qemu_gone_ = false;
  bool destroy_done_ = false;
  int64_t guest_pid_ = -1;
  int64_t handles_[2] = {-1, -1};
  bool eof_[2] = {false, false};
  bool exited_ = false;
  int64_t output_total_ = 0;
  bool truncated_ = false;
  Utf8Sanitizer utf8_[2];
  std::unique_ptr<simdjson::dom::parser> parser_;  // (by pointer: simdjson_fwd.hpp)
  uint64_t t_start_ = 0, t_phase_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace motor::vm
