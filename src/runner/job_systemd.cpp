#include "runner/job_systemd.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "base/log.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "reactor/slow_call.hpp"
#include "runner/unit_properties.hpp"
#include "sandbox/cgroup_internal.hpp"
#include "sandbox/sandbox_codec.hpp"

namespace motor::runner {
namespace {

// Once the job exited: how often the unit is looked up, in case its UnitRemoved was missed.
constexpr uint64_t kGonePollMs = 250;

std::string request_bytes(const sandbox::SandboxConfig& box, const sandbox::SpawnSpec& spec) {
  sandbox::WireWriter w;
  sandbox::encode_sandbox_config(w, box);
  sandbox::encode_spawn_spec(w, spec);
  const auto size = static_cast<uint32_t>(w.bytes().size());
  std::string out(reinterpret_cast<const char*>(&size), sizeof size);
  return out + w.bytes();
}

}  // namespace

SystemdExecution::SystemdExecution(uv_loop_t* loop, SystemdUnits& units, UnitLaunch launch, ExecutionSink& sink)
    : loop_(loop),
      units_(units),
      launch_(std::move(launch)),
      sink_(sink),
      unit_(units.unit_name(launch_.job_id)),
      watch_(loop, units, unit_),
      output_(loop, sink, launch_.job_id, [this] { maybe_end(); }) {}

SystemdExecution::~SystemdExecution() { sd_bus_slot_unref(start_slot_); }

Status SystemdExecution::start(sandbox::SandboxConfig box) {
  box.own_user_namespace = true;  // the unit holds no capability (CapabilityBoundingSet= below)
  if (!units_.bus().connected()) return make_error("io", "the connection to systemd's bus is broken");
  int control[2], out_pipe[2], err_pipe[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) < 0) return sys_error("socketpair");
  UniqueFd control_ours(control[0]), control_unit(control[1]);
  if (pipe2(out_pipe, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);

  const sandbox::SpawnSpec spec = launch_.command.spawn_spec();
  // Into the socket's buffer (empty, far larger than a request): the entry reads it when it runs.
  const std::string request = request_bytes(box, spec);
  if (send(control_ours.get(), request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return sys_error("writing the sandbox request for the unit");
  }
  if (auto s = reactor::uv_status(control_.init(this, uv_pipe_init, loop_, 0), "the unit's control socket"); !s) return s;
  if (auto s = reactor::uv_status(uv_pipe_open(control_.get(), control_ours.get()), "opening the unit's control socket");
      !s) {
    return s;
  }
  (void)control_ours.release();
  if (auto s = read_control(); !s) return s;
  if (auto s = output_.start(std::move(out_read), std::move(err_read)); !s) return s;
  if (auto s = watch_unit(); !s) return s;
  reactor::SlowCall timed("asking systemd for a job unit");
  return send_start(control_unit.get(), out_write.get(), err_write.get());
  // Our copies of the unit's ends close here: the queued message holds its own (sd-bus dups them).
}

Status SystemdExecution::watch_unit() {
  return watch_.watch([this](const std::string& result) { on_start_job_ended(result); }, [this] { unit_gone(); });
}

Status SystemdExecution::send_start(int control_fd, int out_fd, int err_fd) {
  // No capability at all: motor-unit-entry builds the sandbox in a user namespace of the job's
  // own (sandbox/user_namespace.hpp), where it holds what building takes over that namespace only.
  const unit_property::ServiceBasics basics{"motor job " + launch_.job_id + " of " + launch_.caller,
                                            launch_.command.account->name, launch_.memory_bytes, launch_.pids_max,
                                            launch_.cpus.cpus};
  auto properties = [&](sd_bus_message* m) {
    int r = unit_property::service_basics(m, basics);
    if (r >= 0) r = unit_property::exec_start(m, {units_.entry_path()});
    if (r >= 0) r = unit_property::h(m, "StandardInputFileDescriptor", control_fd);
    if (r >= 0) r = unit_property::h(m, "StandardOutputFileDescriptor", out_fd);
    if (r >= 0) r = unit_property::h(m, "StandardErrorFileDescriptor", err_fd);
    return r;
  };
  return units_.start_transient(unit_, properties, &start_slot_, [](sd_bus_message* reply, void* self, sd_bus_error*) -> int {
    static_cast<SystemdExecution*>(self)->on_start_answer(reply);
    return 0;
  }, this);
}

Status SystemdExecution::read_control() {
  const int rc = uv_read_start(
      control_.stream(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = static_cast<SystemdExecution*>(h->data);
        *buf = uv_buf_init(self->control_read_, sizeof self->control_read_);
      },
      [](uv_stream_t* h, ssize_t nread, const uv_buf_t*) {
        if (auto* self = static_cast<SystemdExecution*>(h->data)) self->on_control(nread, self->control_read_);
      });
  return reactor::uv_status(rc, "reading the unit's control socket");
}

void SystemdExecution::on_control(ssize_t nread, const char* data) {
  if (nread > 0) {
    control_buf_.append(data, static_cast<size_t>(nread));
    for (auto nl = control_buf_.find('\n'); nl != std::string::npos; nl = control_buf_.find('\n')) {
      const std::string line = control_buf_.substr(0, nl);
      control_buf_.erase(0, nl + 1);
      on_control_line(line);
      if (ended_ || start_failed_) return;
    }
    if (control_buf_.size() > 4096) control_buf_.clear();  // not the entry's: never a line this long
    return;
  }
  if (nread == 0) return;
  control_.close();
  if (exited_) return;
  // The entry is gone without motor-init's status: killed with the unit (a cancel, a deadline,
  // the unit's TasksMax or memory) or it failed before the sandbox existed.
  if (!setup_seen_ && !kill_issued_) {
    return fail_start("the unit " + unit_ + " ended before its sandbox was built");
  }
  on_exited(SIGKILL, 0);
}

void SystemdExecution::on_control_line(const std::string& line) {
  if (line.rfind("cgroup ", 0) == 0) return on_cgroup(line.substr(7));
  if (line.rfind("events ", 0) == 0) return on_events(line.substr(7));
  if (line.rfind("pid ", 0) == 0) return on_entry_pid(line.substr(4));
  if (line.rfind("steps ", 0) == 0) return on_steps(line.substr(6));
  if (line == "setup") return on_setup("");
  if (line.rfind("setup ", 0) == 0) return on_setup(line.substr(6));
  if (line.rfind("exited ", 0) == 0) {
    long long status = 0, oom = 0, user = -1, system = -1, peak = -1;
    if (std::sscanf(line.c_str() + 7, "%lld %lld %lld %lld %lld", &status, &oom, &user, &system, &peak) >= 2) {
      const auto known = [](long long v) { return v >= 0 ? std::optional<int64_t>(v) : std::nullopt; };
      usage_ = {known(user), known(system), known(peak)};
      return on_exited(static_cast<int>(status), oom);
    }
  }
  log_job(launch_.job_id, "the unit's entry said something unknown: {}", line.substr(0, 200));
}

void SystemdExecution::on_steps(const std::string& stamps) {
  sandbox::SpawnTimes t;
  unsigned long long v[7] = {};
  const int n = std::sscanf(stamps.c_str(), "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                            &v[6]);
  if (n != 7) {
    return log_job(launch_.job_id, "the unit's entry sent malformed steps: {}", stamps.substr(0, 200));
  }
  t.received_ns = v[0];
  t.planned_ns = v[1];
  t.cloned_ns = v[2];
  t.child = {v[3], v[4], v[5], v[6]};
  sink_.execution_spawn_steps(t);
}

void SystemdExecution::on_cgroup(const std::string& dir) {
  if (setup_seen_ || kill_issued_) return;
  if (auto s = limit_socket_buffers(dir); !s) return fail_start(s.error().message);
  limits_set_ = true;
  send_go();
}

void SystemdExecution::command_may_run() {
  may_run_ = true;
  send_go();
}

void SystemdExecution::send_go() {
  if (!limits_set_ || !may_run_ || go_sent_ || setup_seen_ || kill_issued_) return;
  go_sent_ = true;
  static const char kGo[] = "go\n";
  uv_buf_t go = uv_buf_init(const_cast<char*>(kGo), sizeof kGo - 1);
  // Three bytes into an idle socket's buffer: written at once, or the entry is gone (its plan
  // failed while the runner read its cgroup line): its own "setup" line, or its EOF, says so.
  if (uv_try_write(control_.stream(), &go, 1) != static_cast<int>(go.len)) {
    log_job(launch_.job_id, "the unit {} did not take its \"go\"", unit_);
  }
}

void SystemdExecution::on_events(const std::string& dir) {
  if (!events_dir_.empty() || setup_seen_) return;  // named once, before the job exists
  if (auto s = check_own_cgroup(dir); !s) return log_job(launch_.job_id, "{}", s.error().message);
  events_dir_ = dir;
  const std::string path = dir + "/cgroup.events";
  int rc = cgroup_events_.init(this, uv_fs_event_init, loop_);
  if (rc == 0) {
    rc = uv_fs_event_start(cgroup_events_.get(), [](uv_fs_event_t* h, const char*, int, int) {
      if (auto* self = reactor::owner_of<SystemdExecution>(h)) self->check_cgroup_empty();
    }, path.c_str(), 0);
  }
  // Without the watch the job still ends: at the look-ups once it exited, or at UnitRemoved.
  if (auto s = reactor::uv_status(rc, "watching " + path); !s) {
    log_job(launch_.job_id, "{}", s.error().message);
    cgroup_events_.close();
  }
}

void SystemdExecution::on_entry_pid(const std::string& text) {
  if (entry_pidfd_ || setup_seen_) return;  // named once, before the job exists
  char* end = nullptr;
  const long pid = std::strtol(text.c_str(), &end, 10);
  if (pid <= 1 || *end != '\0') return log_job(launch_.job_id, "the unit's entry named a bad pid: {}", text.substr(0, 40));
  // Opened while the entry waits for its "go", so the pid is the entry's. Its exit only makes the
  // runner look at the unit's cgroup.events again, which ends the job only if the cgroup is
  // empty: a wrong process here could not end a job early. (Not checked against
  // /proc/PID/cgroup: reading that takes the kernel's cgroup_mutex, which systemd holds while it
  // makes the units of a burst of jobs, and the loop would wait for it.)
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
  if (!pidfd) return log_job(launch_.job_id, "{}", sys_error("pidfd_open of the unit's entry").message);
  int rc = entry_exit_.init(this, uv_poll_init, loop_, pidfd.get());
  if (rc == 0) {
    rc = uv_poll_start(entry_exit_.get(), UV_READABLE, [](uv_poll_t* h, int, int) {
      auto* self = reactor::owner_of<SystemdExecution>(h);
      if (!self) return;
      self->entry_exit_.close();
      self->check_cgroup_empty();
    });
  }
  if (auto s = reactor::uv_status(rc, "watching the unit's entry"); !s) {
    entry_exit_.close();
    return log_job(launch_.job_id, "{}", s.error().message);
  }
  entry_pidfd_ = std::move(pidfd);
}

void SystemdExecution::check_cgroup_empty() {
  if (cgroup_empty_ || events_dir_.empty() || !exited_) return;  // the entry itself is in it until then
  auto populated = sandbox::cgroup_detail::v2_populated(events_dir_);
  if (!populated || *populated) return;  // unreadable (systemd removed it): UnitRemoved follows
  cgroup_empty_ = true;
  cgroup_events_.close();
  maybe_end();
}

Status SystemdExecution::check_own_cgroup(const std::string& dir) const {
  // The entry's own report of its cgroup: one of the unit's, never anything else's.
  const std::string tail = "/" + unit_;
  if (dir.rfind("/sys/fs/cgroup/", 0) != 0 || dir.size() < tail.size() ||
      dir.compare(dir.size() - tail.size(), tail.size(), tail) != 0 || dir.find("/..") != std::string::npos) {
    return make_error("internal", "the unit " + unit_ + " reported the cgroup \"" + dir.substr(0, 200) + "\"");
  }
  return {};
}

Status SystemdExecution::limit_socket_buffers(const std::string& dir) const {
  if (auto s = check_own_cgroup(dir); !s) return s;
  // As the direct backend does on v1 (sandbox/cgroup_v1.cpp): socket buffers are charged to the
  // job's memory only once the tcp limit is set; v2's memory.max charges them already. Test
  // build only: "socket-buffers" leaves it unset.
  const std::string tcp_limit = dir + "/memory.kmem.tcp.limit_in_bytes";
  if (launch_.memory_bytes <= 0 || control_weakened("socket-buffers") || !sandbox::cgroup_detail::exists(tcp_limit)) {
    return {};
  }
  return sandbox::cgroup_detail::write_text(tcp_limit, std::to_string(launch_.memory_bytes));
}

void SystemdExecution::on_setup(const std::string& error) {
  if (setup_seen_) return;
  setup_seen_ = true;
  setup_error_ = error;
  const bool exec_failed = error.rfind("exec:", 0) == 0;
  if (!error.empty() && !exec_failed) {
    log_job(launch_.job_id, "the sandbox could not be set up in {}: {}", unit_, error);
    return;  // refused before start: no `started` record
  }
  log_entry(LogLevel::kInfo, {{"MOTOR_JOB_ID", launch_.job_id}, {"MOTOR_CALLER", launch_.caller}},
            fmt::format("started for caller {} as the unit {} on cpus {} as {}: {}", launch_.caller, unit_,
                        launch_.cpus.list(), launch_.command.account->name, launch_.summary));
  sink_.execution_started();
  if (exec_failed) {
    // As a shell reports a command it cannot run: a message on stderr and exit status 127.
    (void)sink_.execution_output(JobLog::Kind::kStderr, "motor: cannot run the command: " + error.substr(6) + "\n");
  }
}

void SystemdExecution::on_exited(int wait_status, int64_t oom_kills) {
  if (exited_) return;
  exited_ = true;
  wait_status_ = wait_status;
  oom_kills_ = oom_kills;
  if (oom_kills > 0) log_job(launch_.job_id, "OOM kill in {}: the job hit its memory limit of {} bytes", unit_, launch_.memory_bytes);
  sink_.execution_exited();
  check_cgroup_empty();  // the entry may have left it already
  if (ended_) return;
  // The unit's removal can come first (a StopUnit, then the entry's socket closing); where the
  // cgroup's events are not watched, or a signal was missed, the unit is looked up.
  watch_.poll_until_gone(kGonePollMs);
  maybe_end();
}

void SystemdExecution::on_start_answer(sd_bus_message* reply) {
  start_slot_ = sd_bus_slot_unref(start_slot_);
  if (!sd_bus_message_is_method_error(reply, nullptr)) return;
  const sd_bus_error* e = sd_bus_message_get_error(reply);
  fail_start(fmt::format("systemd did not start the unit {}: {}", unit_, e && e->message ? e->message : "no reason"));
}

void SystemdExecution::on_start_job_ended(const std::string& result) {
  if (result != "done" && !setup_seen_ && !kill_issued_) fail_start(fmt::format("systemd's start job of {} ended \"{}\"", unit_, result));
}

void SystemdExecution::unit_gone() {
  gone_ = true;
  maybe_end();
}

void SystemdExecution::fail_start(const std::string& detail) {
  if (start_failed_ || ended_) return;
  start_failed_ = true;
  log_error("job {}: could not start: {}", launch_.job_id, detail);
  kill(std::nullopt);  // whatever of the unit exists goes
  sink_.execution_start_failed(detail);  // may destroy this
}

void SystemdExecution::kill(std::optional<protocol::KillReason> why) {
  if (ended_) return;
  if (why && !killed_ && !exited_) killed_ = why;
  kill_issued_ = true;
  const int r = kill_and_stop_unit(units_.bus().bus(), unit_);
  if (r < 0) log_error("job {}: {}", launch_.job_id, reactor::sd_bus_failure("killing the unit " + unit_, r).message);
  units_.bus().update();
}

void SystemdExecution::shutdown() { output_.shutdown(); }

void SystemdExecution::maybe_end() {
  if (ended_ || start_failed_ || !exited_ || !(gone_ || cgroup_empty_) || !output_.drained()) return;
  ended_ = true;
  cgroup_events_.close();
  control_.close();
  sink_.execution_ended(end_state());
}

ExecutionEnd SystemdExecution::end_state() const {
  ExecutionEnd end;
  end.oom_killed = oom_kills_ > 0;
  end.killed = killed_;
  end.cpu_user_us = usage_.cpu_user_us;  // (ext) resource_usage, read by the entry from the unit's cgroup
  end.cpu_system_us = usage_.cpu_system_us;
  end.memory_peak_bytes = usage_.memory_peak_bytes;
  set_sandboxed_outcome(end, setup_error_, wait_status_);
  return end;
}

}  // namespace motor::runner
