#include "runner/job_systemd.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "base/log.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "reactor/slow_call.hpp"
#include "sandbox/cgroup_internal.hpp"
#include "sandbox/sandbox_codec.hpp"

namespace motor::runner {
namespace {

constexpr const char* kSystemd = kSystemdService;
constexpr const char* kManagerPath = kSystemdManagerPath;
constexpr const char* kManager = kSystemdManager;
// Once the job exited: how often the unit is looked up, in case its UnitRemoved was missed.
constexpr uint64_t kGonePollMs = 250;

// StartTransientUnit's properties, a(sv).
int prop_s(sd_bus_message* m, const char* name, const char* value) { return sd_bus_message_append(m, "(sv)", name, "s", value); }
int prop_t(sd_bus_message* m, const char* name, uint64_t value) { return sd_bus_message_append(m, "(sv)", name, "t", value); }
int prop_b(sd_bus_message* m, const char* name, bool value) { return sd_bus_message_append(m, "(sv)", name, "b", value ? 1 : 0); }
int prop_i(sd_bus_message* m, const char* name, int value) { return sd_bus_message_append(m, "(sv)", name, "i", value); }
int prop_h(sd_bus_message* m, const char* name, int fd) { return sd_bus_message_append(m, "(sv)", name, "h", fd); }

// A CPU set as systemd reads it: bit i of byte i/8 is CPU i.
int prop_cpus(sd_bus_message* m, const char* name, const std::vector<int>& cpus) {
  std::vector<uint8_t> mask;
  for (int cpu : cpus) {
    if (cpu < 0) continue;
    const size_t byte = static_cast<size_t>(cpu) / 8;
    if (mask.size() <= byte) mask.resize(byte + 1, 0);
    mask[byte] = static_cast<uint8_t>(mask[byte] | (1u << (cpu % 8)));
  }
  int r = sd_bus_message_open_container(m, 'r', "sv");
  if (r >= 0) r = sd_bus_message_append(m, "s", name);
  if (r >= 0) r = sd_bus_message_open_container(m, 'v', "ay");
  if (r >= 0) r = sd_bus_message_append_array(m, 'y', mask.data(), mask.size());
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = sd_bus_message_close_container(m);
  return r;
}

int prop_exec_start(sd_bus_message* m, const std::string& path) {
  const char* argv[] = {path.c_str(), nullptr};
  int r = sd_bus_message_open_container(m, 'r', "sv");
  if (r >= 0) r = sd_bus_message_append(m, "s", "ExecStart");
  if (r >= 0) r = sd_bus_message_open_container(m, 'v', "a(sasb)");
  if (r >= 0) r = sd_bus_message_open_container(m, 'a', "(sasb)");
  if (r >= 0) r = sd_bus_message_open_container(m, 'r', "sasb");
  if (r >= 0) r = sd_bus_message_append(m, "s", path.c_str());
  if (r >= 0) r = sd_bus_message_append_strv(m, const_cast<char**>(argv));
  if (r >= 0) r = sd_bus_message_append(m, "b", 0);
  for (int i = 0; i < 4 && r >= 0; ++i) r = sd_bus_message_close_container(m);
  return r;
}

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
      output_(loop, sink, launch_.job_id, [this] { maybe_end(); }) {}

SystemdExecution::~SystemdExecution() {
  for (sd_bus_slot* slot : {start_slot_, removed_match_, job_match_, get_unit_slot_}) sd_bus_slot_unref(slot);
}

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
  sd_bus* bus = units_.bus().bus();
  // Queued before the start on the same connection, so the bus daemon has them first.
  const std::string removed = "type='signal',sender='org.freedesktop.systemd1',path='/org/freedesktop/systemd1',"
                              "interface='org.freedesktop.systemd1.Manager',member='UnitRemoved',arg0='" + unit_ + "'";
  const std::string job = "type='signal',sender='org.freedesktop.systemd1',path='/org/freedesktop/systemd1',"
                          "interface='org.freedesktop.systemd1.Manager',member='JobRemoved',arg2='" + unit_ + "'";
  auto on_removed = [](sd_bus_message*, void* self, sd_bus_error*) -> int {
    static_cast<SystemdExecution*>(self)->unit_gone();
    return 0;
  };
  auto on_job = [](sd_bus_message* m, void* self, sd_bus_error*) -> int {
    static_cast<SystemdExecution*>(self)->on_job_removed(m);
    return 0;
  };
  if (int r = sd_bus_add_match_async(bus, &removed_match_, removed.c_str(), on_removed, nullptr, this); r < 0) {
    return reactor::sd_bus_failure("watching for the unit's removal", r);
  }
  if (int r = sd_bus_add_match_async(bus, &job_match_, job.c_str(), on_job, nullptr, this); r < 0) {
    return reactor::sd_bus_failure("watching the unit's start job", r);
  }
  return {};
}

Status SystemdExecution::send_start(int control_fd, int out_fd, int err_fd) {
  sd_bus* bus = units_.bus().bus();
  sd_bus_message* m = nullptr;
  int r = sd_bus_message_new_method_call(bus, &m, kSystemd, kManagerPath, kManager, "StartTransientUnit");
  if (r >= 0) r = sd_bus_message_append(m, "ss", unit_.c_str(), "fail");
  if (r >= 0) r = sd_bus_message_open_container(m, 'a', "(sv)");
  const std::string description = "motor job " + launch_.job_id + " of " + launch_.caller;
  if (r >= 0) r = prop_s(m, "Description", description.c_str());
  if (r >= 0) r = prop_s(m, "Slice", kJobSlice);
  if (r >= 0) r = prop_s(m, "Type", "exec");
  if (r >= 0) r = prop_exec_start(m, units_.entry_path());
  if (r >= 0) r = prop_h(m, "StandardInputFileDescriptor", control_fd);
  if (r >= 0) r = prop_h(m, "StandardOutputFileDescriptor", out_fd);
  if (r >= 0) r = prop_h(m, "StandardErrorFileDescriptor", err_fd);
  // Test build only (include/motor/test_switches.hpp): a weakened limit is left unset.
  if (r >= 0 && launch_.memory_bytes > 0 && !control_weakened("memory-limit")) {
    r = prop_t(m, "MemoryMax", static_cast<uint64_t>(launch_.memory_bytes));
    if (r >= 0) r = prop_t(m, "MemorySwapMax", 0);
  }
  if (r >= 0 && launch_.pids_max > 0 && !control_weakened("pids-limit")) {
    r = prop_t(m, "TasksMax", static_cast<uint64_t>(launch_.pids_max));
  }
  if (r >= 0 && !launch_.cpus.cpus.empty() && !control_weakened("cpuset")) {
    r = prop_cpus(m, "AllowedCPUs", launch_.cpus.cpus);
    // systemd 252 has no v1 cpuset: where cpuset is a v1 hierarchy only the affinity pins.
    if (r >= 0) r = prop_cpus(m, "CPUAffinity", launch_.cpus.cpus);
  }
  if (r >= 0) r = prop_s(m, "User", launch_.command.account->name.c_str());
  if (r >= 0) r = prop_b(m, "NoNewPrivileges", true);
  // No capability at all: motor-unit-entry builds the sandbox in a user namespace of the job's
  // own (sandbox/user_namespace.hpp), where it holds what building takes over that namespace only.
  if (r >= 0) r = prop_t(m, "CapabilityBoundingSet", 0);
  // Everything of the unit dies at once on a kill or a stop, as a direct job's cgroup does.
  if (r >= 0) r = prop_s(m, "KillMode", "control-group");
  if (r >= 0) r = prop_i(m, "KillSignal", SIGKILL);
  if (r >= 0) r = prop_b(m, "SendSIGHUP", false);
  if (r >= 0) r = prop_b(m, "IgnoreSIGPIPE", false);
  // An OOM kill ends one process, as in a direct job; the job decides what follows.
  if (r >= 0) r = prop_s(m, "OOMPolicy", "continue");
  // Unloaded as soon as it is dead, also when it failed: gone means its processes are gone.
  if (r >= 0) r = prop_s(m, "CollectMode", "inactive-or-failed");
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = sd_bus_message_append(m, "a(sa(sv))", 0);
  if (r >= 0) {
    r = sd_bus_call_async(bus, &start_slot_, m, [](sd_bus_message* reply, void* self, sd_bus_error*) -> int {
      static_cast<SystemdExecution*>(self)->on_start_answer(reply);
      return 0;
    }, this, 0);
  }
  sd_bus_message_unref(m);
  if (r < 0) return reactor::sd_bus_failure("StartTransientUnit " + unit_, r);
  units_.bus().update();
  return {};
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
  // The unit's removal can come first (a StopUnit, then the entry's socket closing).
  if (!gone_) {
    int rc = gone_poll_.init(this, uv_timer_init, loop_);
    if (rc == 0) {
      rc = uv_timer_start(gone_poll_.get(), [](uv_timer_t* h) {
        if (auto* self = reactor::owner_of<SystemdExecution>(h)) self->poll_unit();
      }, kGonePollMs, kGonePollMs);
    }
    if (auto s = reactor::uv_status(rc, "the timer that looks the unit up"); !s) log_job(launch_.job_id, "{}", s.error().message);
  }
  maybe_end();
}

void SystemdExecution::on_start_answer(sd_bus_message* reply) {
  start_slot_ = sd_bus_slot_unref(start_slot_);
  if (!sd_bus_message_is_method_error(reply, nullptr)) return;
  const sd_bus_error* e = sd_bus_message_get_error(reply);
  fail_start(fmt::format("systemd did not start the unit {}: {}", unit_, e && e->message ? e->message : "no reason"));
}

void SystemdExecution::on_job_removed(sd_bus_message* signal) {
  uint32_t id = 0;
  const char *path = nullptr, *unit = nullptr, *result = nullptr;
  if (sd_bus_message_read(signal, "uoss", &id, &path, &unit, &result) < 0 || !result) return;
  job_match_ = sd_bus_slot_unref(job_match_);  // the start job is the only one we ask for
  if (std::strcmp(result, "done") != 0 && !setup_seen_ && !kill_issued_) {
    fail_start(fmt::format("systemd's start job of {} ended \"{}\"", unit_, result));
  }
}

void SystemdExecution::poll_unit() {
  check_cgroup_empty();
  if (gone_ || cgroup_empty_ || get_unit_slot_) return;
  int r = sd_bus_call_method_async(units_.bus().bus(), &get_unit_slot_, kSystemd, kManagerPath, kManager, "GetUnit",
                                   [](sd_bus_message* reply, void* userdata, sd_bus_error*) -> int {
                                     auto* self = static_cast<SystemdExecution*>(userdata);
                                     self->get_unit_slot_ = sd_bus_slot_unref(self->get_unit_slot_);
                                     if (sd_bus_error_has_name(sd_bus_message_get_error(reply),
                                                               "org.freedesktop.systemd1.NoSuchUnit")) {
                                       self->unit_gone();
                                     }
                                     return 0;
                                   },
                                   this, "s", unit_.c_str());
  if (r < 0) log_job(launch_.job_id, "{}", reactor::sd_bus_failure("GetUnit " + unit_, r).message);
}

void SystemdExecution::unit_gone() {
  if (gone_) return;
  gone_ = true;
  gone_poll_.close();
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
  gone_poll_.close();
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
