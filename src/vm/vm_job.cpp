#include "vm/vm_job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "motor/sys_error.hpp"
#include "reactor/run_soon.hpp"
#include "reactor/slow_call.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "vm/domain_xml.hpp"
#include "vm/guest_file_read.hpp"
#include "vm/libvirt_launcher.hpp"

namespace motor::vm {
namespace {

// How long QEMU may take to exit after libvirt's destroy returned before it is SIGKILLed.
constexpr uint64_t kQemuExitWaitMs = 10000;
// How many 10 ms looks teardown gives a killed preparation's processes to be gone (5 s).
constexpr int kPrepGoneWaitTicks = 500;

uint64_t since_us(uint64_t t0) { return (uv_hrtime() - t0) / 1000; }

std::string dirname_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

Status make_owned_dir(const std::string& dir, uid_t uid, gid_t gid, mode_t mode) {
  if (mkdir(dir.c_str(), mode) < 0) return sys_error("creating " + dir);
  if (chown(dir.c_str(), uid, gid) < 0 || chmod(dir.c_str(), mode) < 0) return sys_error("setting the owner of " + dir);
  return {};
}

// The workspace's persistent data disk: created once, sparse, raw, owned by the QEMU account.
// The guest formats it on first use; the host never reads what the guest wrote on it.
Status ensure_data_disk(const std::string& path, int64_t bytes, uid_t uid, gid_t gid) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return make_error("vm", "the data disk " + path + " is not a regular file");
    return {};
  }
  std::error_code ec;
  std::filesystem::create_directories(dirname_of(path), ec);
  if (ec) return make_error("vm", "creating " + dirname_of(path) + ": " + ec.message());
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return sys_error("creating the data disk " + path);
  if (ftruncate(fd.get(), bytes) < 0 || fchown(fd.get(), uid, gid) < 0) {
    const Error e = sys_error("sizing the data disk " + path);
    unlink(path.c_str());
    return e;
  }
  return {};
}

}  // namespace

VmJob::VmJob(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, VmJobSpec spec, VmJobSink& sink)
    : loop_(loop),
      cgroups_(cgroups),
      spec_(std::move(spec)),
      sink_(sink),
      launcher_(launcher()),
      parser_(std::make_unique<simdjson::dom::parser>()) {}

std::unique_ptr<QemuLauncher> VmJob::launcher() const {
  if (spec_.make_launcher) return spec_.make_launcher();
  return std::make_unique<LibvirtLauncher>(
      loop_, LibvirtLauncherSpec{spec_.helper_path, spec_.libvirt_uri, spec_.domain_name, spec_.work_dir, spec_.hard_limit_bytes});
}

VmJob::~VmJob() {
  // Destroyed unfinished only at exit: kill what runs; the domain is destroyed by the next
  // runner's recovery (it is named in state.json).
  *alive_ = false;
}

void VmJob::start() {
  reactor::SlowCall timed("preparing a VM job");
  t_start_ = t_phase_ = uv_hrtime();
  phase_ = Phase::kDisks;
  std::error_code ec;
  std::filesystem::remove_all(spec_.work_dir, ec);  // a leftover of a runner that died
  if (auto s = make_owned_dir(spec_.work_dir, spec_.qemu_account.uid, spec_.qemu_account.gid, 0700); !s) {
    return end(VmOutcome::Kind::kRefused, 0, s.error().message);
  }
  if (auto s = ensure_data_disk(spec_.data_disk, spec_.data_disk_bytes, spec_.qemu_account.uid, spec_.qemu_account.gid); !s) {
    return end(VmOutcome::Kind::kRefused, 0, s.error().message);
  }
  if (spec_.prep) return prepare();
  if (!spec_.transfer_source.empty()) return make_transfer_disk();
  make_overlay();
}

// The dependency preparation (prep_step.hpp), before any disk is made: its result is a tmpfs in
// the job's directory, put onto the transfer disk by make_transfer_disk and then unmounted.
void VmJob::prepare() {
  phase_ = Phase::kPreparing;
  PrepSpec& prep = *spec_.prep;
  prep.output_dir = spec_.work_dir + "/prep";
  if (mkdir(prep.output_dir.c_str(), 0700) != 0) return end(VmOutcome::Kind::kRefused, 0, sys_error("creating " + prep.output_dir).message);
  if (auto s = mount_prep_output(prep.output_dir, prep.max_bytes, prep.account); !s) {
    return end(VmOutcome::Kind::kRefused, 0, s.error().message);
  }
  prep_mounted_ = true;
  sink_.vm_prepare_output("motor: preparing dependencies (vm_prepare_command) as " + prep.account.name + "\n");
  auto started = PrepStep::start(
      loop_, cgroups_, starter(), prep, [this](std::string_view text) { sink_.vm_prepare_output(text); },
      [this](Status s) {
        if (stopping()) return teardown();
        if (!s) return end(VmOutcome::Kind::kRefused, 0, "the dependency preparation (vm_prepare_command) failed: " + s.error().message);
        outcome_.times.prepare_us = since_us(t_phase_);
        sink_.vm_prepare_output("motor: dependencies prepared in " + std::to_string(outcome_.times.prepare_us / 1000) + " ms\n");
        t_phase_ = uv_hrtime();
        phase_ = Phase::kDisks;
        make_transfer_disk();
      });
  if (!started) return end(VmOutcome::Kind::kRefused, 0, "the dependency preparation could not start: " + started.error().message);
  prep_ = std::move(*started);
}

void VmJob::make_transfer_disk() {
  const std::string dir = spec_.work_dir + "/xfer";
  if (auto s = make_owned_dir(dir, spec_.tool_account.uid, spec_.tool_account.gid, 0700); !s) {
    return end(VmOutcome::Kind::kRefused, 0, s.error().message);
  }
  DiskToolSpec tool;
  tool.command = mke2fs_from_dir_command(spec_.transfer_source, dir + "/transfer.img", spec_.transfer_disk_bytes);
  tool.writable_dir = dir;
  tool.read_only = {{spec_.transfer_source, spec_.transfer_source}};
  if (spec_.prep) {  // the workspace's root entries and the preparation's result, side by side
    const std::string stage = "/transfer-stage";
    auto staged = stage_transfer_tree(stage, spec_.prep->workspace_dir, spec_.prep->output_dir, spec_.prep->account,
                                      spec_.tool_account);
    if (!staged) return end(VmOutcome::Kind::kRefused, 0, "building the transfer disk: " + staged.error().message);
    tool.command = mke2fs_from_dir_command(stage, dir + "/transfer.img", spec_.transfer_disk_bytes);
    tool.read_only = std::move(staged->read_only);
    tool.symlinks = std::move(staged->symlinks);
  }
  tool.account = spec_.tool_account;
  tool.init_path = spec_.init_path;
  tool.cgroup_name = spec_.disk_cgroup;
  auto started = DiskTool::start(loop_, cgroups_, starter(), tool, [this, dir](Status s) {
    if (stopping()) return teardown();
    if (!s) return end(VmOutcome::Kind::kRefused, 0, "building the transfer disk: " + s.error().message);
    // Host-written, never guest-written: root-owned and read-only before QEMU ever sees it.
    const std::string disk = spec_.work_dir + "/transfer.img";
    if (rename((dir + "/transfer.img").c_str(), disk.c_str()) < 0 || chown(disk.c_str(), 0, 0) < 0 ||
        chmod(disk.c_str(), 0444) < 0) {
      return end(VmOutcome::Kind::kRefused, 0, sys_error("sealing the transfer disk").message);
    }
    rmdir(dir.c_str());
    if (auto gone = remove_prep_result(); !gone) return end(VmOutcome::Kind::kRefused, 0, gone.error().message);
    make_overlay();
  });
  if (!started) return end(VmOutcome::Kind::kRefused, 0, "building the transfer disk: " + started.error().message);
  disk_tool_ = std::move(*started);
}

Status VmJob::remove_prep_result() {
  if (!prep_mounted_) return {};
  prep_mounted_ = false;
  const std::string dir = spec_.work_dir + "/prep";
  if (auto s = unmount_prep_output(dir); !s) return s;
  if (rmdir(dir.c_str()) != 0) return sys_error("removing " + dir);
  return {};
}

void VmJob::make_overlay() {
  DiskToolSpec tool;
  tool.command = qemu_img_overlay_command(spec_.sealed_image, spec_.work_dir + "/system.qcow2");
  tool.writable_dir = spec_.work_dir;
  tool.read_only = {{dirname_of(spec_.sealed_image), dirname_of(spec_.sealed_image)}};
  tool.account = spec_.qemu_account;
  tool.init_path = spec_.init_path;
  tool.cgroup_name = spec_.disk_cgroup;
  auto started = DiskTool::start(loop_, cgroups_, starter(), tool, [this](Status s) {
    if (stopping()) return teardown();
    if (!s) return end(VmOutcome::Kind::kRefused, 0, "creating the overlay: " + s.error().message);
    outcome_.times.disks_us = since_us(t_phase_);
    create_domain();
  });
  if (!started) return end(VmOutcome::Kind::kRefused, 0, "creating the overlay: " + started.error().message);
  // The previous tool (transfer disk) finished: replacing it here is after its callback ran.
  disk_tool_ = std::move(*started);
}

void VmJob::create_domain() {
  t_phase_ = uv_hrtime();
  phase_ = Phase::kCreating;
  DomainSpec d;
  d.name = spec_.domain_name;
  d.emulated = spec_.emulated;
  d.cpus = spec_.cpus;
  d.memory_bytes = spec_.memory_bytes;
  d.hard_limit_bytes = spec_.hard_limit_bytes;
  d.qemu_uid = spec_.qemu_account.uid;
  d.qemu_gid = spec_.qemu_account.gid;
  d.overlay = spec_.work_dir + "/system.qcow2";
  d.sealed_image = spec_.sealed_image;
  d.data_disk = spec_.data_disk;
  if (!spec_.transfer_source.empty() || spec_.prep) d.transfer_disk = spec_.work_dir + "/transfer.img";
  d.agent_socket = spec_.work_dir + "/agent.sock";
  d.console_log = spec_.work_dir + "/console.log";
  d.kernel = spec_.kernel;
  d.initrd = spec_.initrd;
  d.cmdline = spec_.cmdline;
  if (auto st = launcher_->create(d, [this](Expected<std::string> r) { on_created(std::move(r)); }); !st) {
    return end(VmOutcome::Kind::kRefused, 0, st.error().message);
  }
}

void VmJob::on_created(Expected<std::string> pid_text) {
  if (!pid_text) {
    if (stopping()) return teardown();
    return end(VmOutcome::Kind::kRefused, 0, "starting the VM: " + pid_text.error().message);
  }
  domain_created_ = true;
  qemu_pid_ = static_cast<pid_t>(std::atol(pid_text->c_str()));
  if (qemu_pid_ > 1) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, qemu_pid_, 0));
    if (fd >= 0) {
      qemu_pidfd_ = UniqueFd(fd);
      int rc = qemu_poll_.init(this, uv_poll_init, loop_, fd);
      if (rc == 0) {
        rc = uv_poll_start(qemu_poll_.get(), UV_READABLE, [](uv_poll_t* h, int, int) {
          if (auto* self = reactor::owner_of<VmJob>(h)) self->on_qemu_exit();
        });
      }
      if (rc != 0) {  // unwatched, QEMU's exit would go unseen: refused below
        qemu_poll_.close();
        qemu_pidfd_.reset();
      }
    }
  }
  if (stopping()) return teardown();
  if (!qemu_pidfd_) return end(VmOutcome::Kind::kRefused, 0, "QEMU's process (pid " + *pid_text + ") cannot be watched");
  QemuConfinementSpec c;
  c.pid = qemu_pid_;
  c.uid = spec_.qemu_account.uid;
  c.gid = spec_.qemu_account.gid;
  c.hard_limit_bytes = spec_.hard_limit_bytes;
  c.pids_max = spec_.pids_max;
  c.pids_cgroup = spec_.pids_cgroup;
  c.environment_names = launcher_->environment_names();
  c.pids_limited_by_launcher = launcher_->limits_pids();
  auto confined = [&] {
    reactor::SlowCall timed("checking QEMU's confinement");
    return confine_qemu(c);
  }();
  if (!confined) return end(VmOutcome::Kind::kRefused, 0, "QEMU's confinement: " + confined.error().message);
  confinement_ = std::move(*confined);
  outcome_.core_scheduling = confinement_.core_scheduling;
  sink_.vm_log("QEMU pid " + std::to_string(qemu_pid_) + " (" + launcher_->describe() + ") confined: account " + spec_.qemu_account.name +
               ", interfaces lo only, memory cgroup " + confinement_.memory_cgroup_dir + ", pids limit " +
               confinement_.pids_limit_file + ", core scheduling " + (confinement_.core_scheduling ? "on" : "unavailable"));
  resume();
}

void VmJob::resume() {
  phase_ = Phase::kResuming;
  auto st = launcher_->resume([this](Expected<std::string> r) {
    if (stopping()) return teardown();
    if (!r) return end(VmOutcome::Kind::kRefused, 0, "resuming the VM: " + r.error().message);
    outcome_.times.domain_start_us = since_us(t_phase_);
    connect_agent();
  });
  if (!st) return end(VmOutcome::Kind::kRefused, 0, st.error().message);
}

void VmJob::connect_agent() {
  phase_ = Phase::kAgent;
  t_phase_ = uv_hrtime();
  agent_ = std::make_unique<QgaClient>(loop_, spec_.max_message_bytes);
  agent_->connect(spec_.work_dir + "/agent.sock", [this](Status s) {
    if (!s) return end(VmOutcome::Kind::kRefused, 0, s.error().message);
    agent_->sync(spec_.agent_timeout_ms, [this](Status synced) {
      if (!synced) return end(VmOutcome::Kind::kRefused, 0, "the guest agent did not become ready: " + synced.error().message);
      outcome_.times.agent_ready_us = since_us(t_phase_);
      open_outputs();
    });
  });
}

void VmJob::open_outputs() {
  t_phase_ = uv_hrtime();
  agent_->request(qga_file_open(spec_.guest_stdout, "w+"), spec_.request_timeout_ms, [this](Expected<std::string> m) {
    auto h = m ? qga_parse_int_return(*parser_, *m) : Expected<int64_t>(m.error());
    if (!h) return end(VmOutcome::Kind::kRefused, 0, "opening the guest's output file: " + h.error().message);
    handles_[0] = *h;
    agent_->request(qga_file_open(spec_.guest_stderr, "w+"), spec_.request_timeout_ms, [this](Expected<std::string> m2) {
      auto h2 = m2 ? qga_parse_int_return(*parser_, *m2) : Expected<int64_t>(m2.error());
      if (!h2) return end(VmOutcome::Kind::kRefused, 0, "opening the guest's output file: " + h2.error().message);
      handles_[1] = *h2;
      exec_command();
    });
  });
}

void VmJob::exec_command() {
  std::vector<std::string> args{spec_.guest_stdout, spec_.guest_stderr, spec_.guest_changes, spec_.cwd.empty() ? "." : spec_.cwd};
  args.insert(args.end(), spec_.argv.begin(), spec_.argv.end());
  agent_->request(qga_exec(spec_.guest_runner, args, spec_.env), spec_.request_timeout_ms, [this](Expected<std::string> m) {
    auto pid = m ? qga_parse_exec(*parser_, *m) : Expected<int64_t>(m.error());
    if (!pid) return end(VmOutcome::Kind::kRefused, 0, "starting the command in the guest: " + pid.error().message);
    guest_pid_ = *pid;
    phase_ = Phase::kRunning;
    sink_.vm_command_started();
    if (auto s = reactor::uv_status(tick_timer_.init(this, uv_timer_init, loop_), "the VM job's poll timer"); !s) {
      return end(VmOutcome::Kind::kFailed, 0, s.error().message);
    }
    arm_tick(spec_.poll_ms);
  });
}

// One round: a bounded read of each stream, then the command's status. The next round is armed
// when this one is done, so rounds never overlap and the rate is at most 2 reads per poll_ms.
void VmJob::tick() {
  if (phase_ != Phase::kRunning) return;
  read_stream(0, [this] { read_stream(1, [this] { check_status(); }); });
}

void VmJob::read_stream(int i, std::function<void()> next) {
  if (truncated_ || handles_[i] < 0) {
    eof_[i] = true;
    return next();
  }
  const int64_t want = std::min(spec_.read_chunk_bytes, spec_.max_output_bytes - output_total_);
  agent_->request(qga_file_read(handles_[i], want), spec_.request_timeout_ms,
                  [this, i, want, next = std::move(next)](Expected<std::string> m) {
                    if (phase_ != Phase::kRunning) return;
                    auto chunk = m ? qga_parse_file_read(*parser_, *m, static_cast<size_t>(want)) : Expected<QgaFileChunk>(m.error());
                    if (!chunk) return end(VmOutcome::Kind::kFailed, 0, "reading the command's output: " + chunk.error().message);
                    eof_[i] = chunk->bytes.empty() || chunk->eof;
                    if (!chunk->bytes.empty()) {
                      output_total_ += static_cast<int64_t>(chunk->bytes.size());
                      const std::string text = utf8_[i].feed(chunk->bytes);
                      if (!text.empty()) sink_.vm_output(i == 1, text);
                    }
                    if (output_total_ >= spec_.max_output_bytes && !truncated_) {
                      truncated_ = true;
                      outcome_.output_truncated = true;
                      sink_.vm_output(true, "\nmotor: output stopped after " + std::to_string(output_total_) +
                                                " bytes (the VM job output limit)\n");
                    }
                    next();
                  });
}

void VmJob::arm_tick(uint64_t ms) {
  const int rc = uv_timer_start(tick_timer_.get(), [](uv_timer_t* t) {
    if (auto* self = reactor::owner_of<VmJob>(t)) self->tick();
  }, ms, 0);
  if (auto s = reactor::uv_status(rc, "arming the VM job's poll timer"); !s) end(VmOutcome::Kind::kFailed, 0, s.error().message);
}

void VmJob::check_status() {
  auto rearm = [this](uint64_t ms) { arm_tick(ms); };
  if (exited_) {
    // The command is gone: read on until both files are drained, then report.
    if ((eof_[0] && eof_[1]) || truncated_) {
      for (int i = 0; i < 2; ++i) {
        const std::string tail = utf8_[i].flush();
        if (!tail.empty()) sink_.vm_output(i == 1, tail);
      }
      outcome_.times.command_us = since_us(t_phase_);
      return read_changes();
    }
    return rearm(0);
  }
  agent_->request(qga_exec_status(guest_pid_), spec_.request_timeout_ms, [this, rearm](Expected<std::string> m) {
    if (phase_ != Phase::kRunning) return;
    auto st = m ? qga_parse_exec_status(*parser_, *m) : Expected<QgaExecStatus>(m.error());
    if (!st) return end(VmOutcome::Kind::kFailed, 0, "asking for the command's status: " + st.error().message);
    if (!st->exited) return rearm(spec_.poll_ms);
    exited_ = true;
    eof_[0] = eof_[1] = false;  // what it wrote before exiting may not be read yet
    if (st->signal) {
      outcome_.kind = VmOutcome::Kind::kSignal;
      outcome_.code = *st->signal;
    } else {
      outcome_.kind = VmOutcome::Kind::kExit;
      outcome_.code = st->exit_code.value_or(0);
    }
    rearm(0);
  });
}

// The guest runner's listing of what the command changed: read bounded in bytes and in time (one
// request timeout for the whole file: the deadline no longer applies once the command exited),
// believed only once every entry is valid. Without one the job still ends as it ended; only its
// report is null.
void VmJob::read_changes() {
  phase_ = Phase::kListing;
  GuestFileRead file{spec_.guest_changes, kMaxListingBytes, spec_.read_chunk_bytes, spec_.request_timeout_ms};
  read_guest_file(*agent_, *parser_, std::move(file), [this](Expected<std::string> listing) {
    if (phase_ != Phase::kListing) return;
    auto changes = [&]() -> Expected<std::vector<GuestChange>> {
      if (!listing) return listing.error();
      reactor::SlowCall timed("validating a guest's change listing");
      return parse_guest_changes(*listing);
    }();
    if (changes) {
      outcome_.changes = std::move(*changes);
    } else {
      outcome_.changes_note = "the guest's change listing is not believed: " + changes.error().message;
      sink_.vm_log(outcome_.changes_note);
    }
    end(outcome_.kind, outcome_.code, "");
  });
}

void VmJob::end(VmOutcome::Kind kind, int64_t code, std::string detail) {
  if (!outcome_set_) {
    outcome_set_ = true;
    if (stop_requested_) {
      outcome_.kind = VmOutcome::Kind::kKilled;
    } else {
      outcome_.kind = kind;
      outcome_.code = code;
      outcome_.detail = std::move(detail);
    }
    if (!outcome_.detail.empty()) sink_.vm_log("VM job ends: " + outcome_.detail);
  }
  teardown();
}

void VmJob::kill(const std::string& why) {
  if (finished_ || stop_requested_ || phase_ == Phase::kTearingDown || phase_ == Phase::kDone) return;
  // The command has exited: nothing is left to stop, and its outcome stands. What remains
  // (draining its output, reading the change listing) is bounded by the agent's request timeouts.
  if (exited_) return;
  stop_requested_ = true;
  if (!outcome_set_) {
    outcome_set_ = true;
    outcome_.kind = VmOutcome::Kind::kKilled;
    outcome_.killed = why;
  }
  sink_.vm_log("VM job killed (" + why + ")");
  // A create in flight finishes first (its callback sees stop_requested_ and tears down), so
  // the domain it makes is known and destroyed; anything else stops now.
  if (phase_ == Phase::kCreating && launcher_->creating()) return;
  teardown();
}

void VmJob::teardown() {
  if (phase_ == Phase::kTearingDown || phase_ == Phase::kDone) return;
  const bool domain_may_exist = phase_ >= Phase::kCreating;
  phase_ = Phase::kTearingDown;
  t_phase_ = uv_hrtime();
  tick_timer_.close();
  // A preparation still running is killed, and the job ends only once its processes are gone,
  // so that a client that saw the terminal record finds nothing of it.
  if (prep_) prep_->kill();
  if (prep_ && !prep_->processes_gone()) return wait_for_prep(domain_may_exist);
  finish_teardown(domain_may_exist);
}

// cgroup.kill only queues the signals: polled every 10 ms, for 5 s at most (then the reaper has
// what is left, as for a busy job cgroup).
void VmJob::wait_for_prep(bool domain_may_exist) {
  prep_wait_domain_ = domain_may_exist;
  int rc = prep_wait_timer_.init(this, uv_timer_init, loop_);
  if (rc == 0) {
    rc = uv_timer_start(prep_wait_timer_.get(), [](uv_timer_t* t) {
      auto* self = reactor::owner_of<VmJob>(t);
      if (!self) return;
      const bool gone = !self->prep_ || self->prep_->processes_gone();
      if (!gone && ++self->prep_wait_ticks_ < kPrepGoneWaitTicks) return;
      if (!gone) self->sink_.vm_log("the preparation's processes outlived its kill by 5 s; its cgroup's reaper has them");
      self->prep_wait_timer_.close();
      self->finish_teardown(self->prep_wait_domain_);
    }, 10, 10);
  }
  if (auto st = reactor::uv_status(rc, "the timer that waits for the preparation's end"); !st) {
    sink_.vm_log(st.error().message);
    finish_teardown(domain_may_exist);
  }
}

void VmJob::finish_teardown(bool domain_may_exist) {
  // Deferred: teardown may run inside a callback of one of these.
  if (prep_) prep_->stop();
  struct Doomed {
    std::unique_ptr<QgaClient> agent;
    std::unique_ptr<DiskTool> tool;
    std::unique_ptr<PrepStep> prep;
  };
  auto doomed = std::make_shared<Doomed>(Doomed{std::move(agent_), std::move(disk_tool_), std::move(prep_)});
  if (auto s = reactor::run_soon(loop_, [doomed] { *doomed = Doomed{}; }); !s) {
    sink_.vm_log(s.error().message + "; the VM job's helpers are freed at the runner's exit");
    new std::shared_ptr<Doomed>(std::move(doomed));  // never freed inside the callback that runs this
  }
  if (!domain_may_exist) return cleanup();
  if (auto st = launcher_->destroy([this](Expected<std::string> r) { destroyed(r ? Status{} : Status(r.error())); }); !st) {
    return destroyed(st);
  }
}

void VmJob::destroyed(Status s) {
  destroy_done_ = true;
  if (!s) sink_.vm_log("destroying the domain: " + s.error().message);
  if (!qemu_pidfd_ || qemu_gone_) return cleanup();
  if (!s) syscall(SYS_pidfd_send_signal, qemu_pidfd_.get(), SIGKILL, nullptr, 0);
  int rc = exit_wait_timer_.init(this, uv_timer_init, loop_);
  if (rc == 0) {
    rc = uv_timer_start(exit_wait_timer_.get(), [](uv_timer_t* t) {
      auto* self = reactor::owner_of<VmJob>(t);
      if (!self || self->qemu_gone_) return;
      self->sink_.vm_log("QEMU outlived the domain's destroy; killing it");
      syscall(SYS_pidfd_send_signal, self->qemu_pidfd_.get(), SIGKILL, nullptr, 0);
    }, kQemuExitWaitMs, kQemuExitWaitMs);
  }
  if (auto st = reactor::uv_status(rc, "the timer that waits for QEMU's exit"); !st) {
    sink_.vm_log(st.error().message + "; killing QEMU now");
    syscall(SYS_pidfd_send_signal, qemu_pidfd_.get(), SIGKILL, nullptr, 0);
  }
}

void VmJob::on_qemu_exit() {
  if (qemu_gone_) return;
  qemu_gone_ = true;
  qemu_poll_.close();
  if (phase_ == Phase::kTearingDown) {
    if (destroy_done_) cleanup();
    return;
  }
  // QEMU ended on its own: the guest powered off or crashed (on_* = destroy), or someone killed it.
  end(VmOutcome::Kind::kFailed, 0, "the VM stopped before the command finished");
}

void VmJob::cleanup() {
  if (phase_ == Phase::kDone) return;
  exit_wait_timer_.close();
  qemu_poll_.close();
  qemu_pidfd_.reset();
  if (!confinement_.pids_cgroup_dir.empty()) {
    sandbox::reap_or_leave(cgroups_.reaper(), sandbox::remains_of_dirs({confinement_.pids_cgroup_dir}, "VM job " + spec_.job_id));
  }
  if (auto s = remove_prep_result(); !s) sink_.vm_log(s.error().message);
  // Normally motor-vm-helper deleted the directory after the destroy; what is left here (a job
  // that ended before its domain existed, a failed destroy) is small.
  if (struct stat st {}; lstat(spec_.work_dir.c_str(), &st) == 0) {
    reactor::SlowCall timed("deleting a VM job's directory");
    std::error_code ec;
    std::filesystem::remove_all(spec_.work_dir, ec);
    if (ec) sink_.vm_log("deleting " + spec_.work_dir + ": " + ec.message());
  }
  outcome_.times.teardown_us = since_us(t_phase_);
  phase_ = Phase::kDone;
  finished_ = true;
  sink_.vm_log("VM phases (ms): prepare " + std::to_string(outcome_.times.prepare_us / 1000) + ", disks " + std::to_string(outcome_.times.disks_us / 1000) + ", domain start " +
               std::to_string(outcome_.times.domain_start_us / 1000) + ", agent ready " +
               std::to_string(outcome_.times.agent_ready_us / 1000) + ", command " +
               std::to_string(outcome_.times.command_us / 1000) + ", teardown " +
               std::to_string(outcome_.times.teardown_us / 1000));
  sink_.vm_finished(outcome_);
}

}  // namespace motor::vm
