#include "runner/systemd_units.hpp"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/log.hpp"

namespace motor::runner {
namespace {

constexpr const char* kSystemd = kSystemdService;
constexpr const char* kSystemdPrivateSocket = "/run/systemd/private";
constexpr const char* kManagerPath = kSystemdManagerPath;
constexpr const char* kManager = kSystemdManager;
constexpr const char* kProperties = "org.freedesktop.DBus.Properties";
constexpr uint64_t kStartupCallTimeoutUs = 2 * 1000 * 1000;
constexpr uint64_t kLeftoverWaitMs = 10 * 1000;
constexpr uint64_t kRelistMs = 50;
constexpr std::string_view kUnitPrefix = "motor-job-", kUnitSuffix = ".service";

std::string answer_error(sd_bus_message* reply) {
  const sd_bus_error* e = sd_bus_message_get_error(reply);
  return e ? fmt::format("{} ({})", e->message ? e->message : "", e->name ? e->name : "") : "no reason";
}

uint64_t now_ms(uv_loop_t* loop) { return uv_now(loop); }

}  // namespace

int log_bus_failure(sd_bus_message* m, void*, sd_bus_error*) {
  if (sd_bus_message_is_method_error(m, nullptr)) {
    const sd_bus_error* e = sd_bus_message_get_error(m);
    if (!sd_bus_error_has_name(e, "org.freedesktop.systemd1.NoSuchUnit")) log_warning("systemd: {} ({})", e->message, e->name);
  }
  return 0;
}

int kill_and_stop_unit(sd_bus* bus, const std::string& unit) {
  int r = sd_bus_call_method_async(bus, nullptr, kSystemd, kManagerPath, kManager, "KillUnit", log_bus_failure, nullptr,
                                   "ssi", unit.c_str(), "all", SIGKILL);
  if (r >= 0) {
    r = sd_bus_call_method_async(bus, nullptr, kSystemd, kManagerPath, kManager, "StopUnit", log_bus_failure, nullptr, "ss",
                                 unit.c_str(), "replace");
  }
  return r;
}

std::string manager_signal_match(sd_bus* bus, const std::string& member, const std::string& extra) {
  const std::string sender = sd_bus_is_bus_client(bus) > 0 ? std::string("sender='") + kSystemd + "'," : "";
  return "type='signal'," + sender + "path='" + kManagerPath + "',interface='" + kManager + "',member='" + member + "'" + extra;
}

std::string runner_instance(const std::string& state_dir) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : state_dir) hash = (hash ^ c) * 16777619u;
  return fmt::format("{:08x}", hash);
}

std::string SystemdUnits::unit_name(const std::string& job_id) const {
  return std::string(kUnitPrefix) + instance_ + "-" + job_id + std::string(kUnitSuffix);
}

Expected<std::unique_ptr<SystemdUnits>> SystemdUnits::open(uv_loop_t* loop, std::string entry_path, std::string instance) {
  if (access(entry_path.c_str(), X_OK) != 0) {
    return make_error("config", "motor-unit-entry is not at " + entry_path + " (it is built beside motor-runner)");
  }
  // As systemctl and systemd-run do as root: straight to systemd's private socket, so that no
  // bus daemon carries (and wakes for) each StartTransientUnit and each signal of a job's unit.
  const bool private_socket = geteuid() == 0 && access(kSystemdPrivateSocket, F_OK) == 0;
  auto bus = private_socket ? reactor::SdBusLoop::open_peer(loop, std::string("unix:path=") + kSystemdPrivateSocket)
                            : reactor::SdBusLoop::open_system(loop);
  if (!bus && private_socket) {
    log_warning("systemd's private socket: {}; using the system bus", bus.error().message);
    bus = reactor::SdBusLoop::open_system(loop);
  }
  if (!bus) return bus.error();
  (*bus)->on_broken([](const std::string& why) {
    log_error("the connection to systemd's bus broke ({}); job units can no longer be started or watched", why);
  });
  return std::unique_ptr<SystemdUnits>(new SystemdUnits(loop, std::move(*bus), std::move(entry_path), std::move(instance)));
}

SystemdUnits::~SystemdUnits() {
  sd_bus_slot_unref(call_slot_);
  sd_bus_slot_unref(job_removed_match_);
}

void SystemdUnits::on_start_job_end(const std::string& unit, StartJobEnded handler) {
  start_jobs_[unit] = std::move(handler);
}

void SystemdUnits::on_job_removed(sd_bus_message* signal) {
  uint32_t id = 0;
  const char *path = nullptr, *unit = nullptr, *result = nullptr;
  if (sd_bus_message_read(signal, "uoss", &id, &path, &unit, &result) < 0 || !unit || !result) return;
  auto it = start_jobs_.find(unit);
  if (it == start_jobs_.end()) return;
  // Out of the map before it runs: the handler may register or forget units, its own included.
  StartJobEnded handler = std::move(it->second);
  start_jobs_.erase(it);
  if (handler) handler(result);
}

Status SystemdUnits::start_transient(const std::string& unit, const std::function<int(sd_bus_message*)>& properties,
                                     sd_bus_slot** slot, sd_bus_message_handler_t answer, void* userdata) {
  sd_bus_message* m = nullptr;
  int r = sd_bus_message_new_method_call(bus_->bus(), &m, kSystemd, kManagerPath, kManager, "StartTransientUnit");
  if (r >= 0) r = sd_bus_message_append(m, "ss", unit.c_str(), "fail");
  if (r >= 0) r = sd_bus_message_open_container(m, 'a', "(sv)");
  if (r >= 0) r = properties(m);
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = sd_bus_message_append(m, "a(sa(sv))", 0);
  if (r >= 0) r = sd_bus_call_async(bus_->bus(), slot, m, answer, userdata, 0);
  sd_bus_message_unref(m);
  if (r < 0) return reactor::sd_bus_failure("StartTransientUnit " + unit, r);
  bus_->update();
  return {};
}

Status SystemdUnits::call(const char* interface, const char* member, const std::function<int(sd_bus_message*)>& append,
                          sd_bus_message_handler_t answer) {
  sd_bus_message* m = nullptr;
  int r = sd_bus_message_new_method_call(bus_->bus(), &m, kSystemd, kManagerPath, interface, member);
  if (r >= 0) r = append(m);
  if (r >= 0) r = sd_bus_call_async(bus_->bus(), &call_slot_, m, answer, this, kStartupCallTimeoutUs);
  sd_bus_message_unref(m);
  if (r < 0) return reactor::sd_bus_failure(member, r);
  bus_->update();
  return {};
}

void SystemdUnits::start(Started done) {
  done_ = std::move(done);
  const std::string job_removed = manager_signal_match(bus_->bus(), "JobRemoved");
  int r = sd_bus_add_match_async(bus_->bus(), &job_removed_match_, job_removed.c_str(),
                                 [](sd_bus_message* m, void* self, sd_bus_error*) -> int {
                                   static_cast<SystemdUnits*>(self)->on_job_removed(m);
                                   return 0;
                                 }, nullptr, this);
  if (r < 0) return finish(reactor::sd_bus_failure("watching systemd's JobRemoved", r));
  r = sd_bus_call_method_async(bus_->bus(), nullptr, kSystemd, kManagerPath, kManager, "Subscribe", log_bus_failure,
                                   nullptr, "");
  if (r < 0) return finish(reactor::sd_bus_failure("subscribing to systemd's signals", r));
  auto s = call(kProperties, "Get", [](sd_bus_message* m) { return sd_bus_message_append(m, "ss", kManager, "Version"); },
                [](sd_bus_message* reply, void* self, sd_bus_error*) -> int {
                  static_cast<SystemdUnits*>(self)->on_version(reply);
                  return 0;
                });
  if (!s) finish(s.error());
}

void SystemdUnits::on_version(sd_bus_message* reply) {
  call_slot_ = sd_bus_slot_unref(call_slot_);
  const char* version = nullptr;
  if (sd_bus_message_is_method_error(reply, nullptr)) return finish(make_error("io", answer_error(reply)));
  if (int r = sd_bus_message_read(reply, "v", "s", &version); r < 0) {
    return finish(reactor::sd_bus_failure("reading systemd's version", r));
  }
  log_info("job_backend: Linux jobs run as transient units of systemd {} in {}, named {}", version ? version : "?",
           kJobSlice, unit_name("<id>"));
  list_units();
}

void SystemdUnits::list_units() {
  const std::string pattern = std::string(kUnitPrefix) + instance_ + "-*" + std::string(kUnitSuffix);
  auto s = call(kManager, "ListUnitsByPatterns",
                [&pattern](sd_bus_message* m) {
                  const char* patterns[] = {pattern.c_str(), nullptr};
                  int r = sd_bus_message_append_strv(m, nullptr);
                  return r < 0 ? r : sd_bus_message_append_strv(m, const_cast<char**>(patterns));
                },
                [](sd_bus_message* reply, void* self, sd_bus_error*) -> int {
                  static_cast<SystemdUnits*>(self)->on_listed(reply);
                  return 0;
                });
  if (!s) finish(s.error());
}

void SystemdUnits::on_listed(sd_bus_message* reply) {
  call_slot_ = sd_bus_slot_unref(call_slot_);
  if (sd_bus_message_is_method_error(reply, nullptr)) {
    return finish(make_error("io", "listing the job units: " + answer_error(reply)));
  }
  std::vector<std::string> names;
  int r = sd_bus_message_enter_container(reply, SD_BUS_TYPE_ARRAY, "(ssssssouso)");
  const char* name = nullptr;
  while (r >= 0 && (r = sd_bus_message_read(reply, "(ssssssouso)", &name, nullptr, nullptr, nullptr, nullptr, nullptr,
                                            nullptr, nullptr, nullptr, nullptr)) > 0) {
    names.emplace_back(name);
  }
  if (r < 0) return finish(reactor::sd_bus_failure("reading the job units", r));
  if (names.empty()) return finish(std::move(leftover_ids_));
  if (stopping_) {
    if (now_ms(loop_) < give_up_at_ms_) return list_again();
    log_warning("{} job unit(s) of an earlier runner are still loaded after {} s (first: {})", names.size(),
                kLeftoverWaitMs / 1000, names.front());
    return finish(std::move(leftover_ids_));
  }
  stopping_ = true;
  give_up_at_ms_ = now_ms(loop_) + kLeftoverWaitMs;
  const size_t prefix = kUnitPrefix.size() + instance_.size() + 1;
  for (const auto& unit : names) {
    log_warning("stopping the job unit {} an earlier runner left", unit);
    r = kill_and_stop_unit(bus_->bus(), unit);
    if (r < 0) log_warning("{}", reactor::sd_bus_failure("stopping " + unit, r).message);
    if (unit.size() > prefix + kUnitSuffix.size()) leftover_ids_.push_back(unit.substr(prefix, unit.size() - prefix - kUnitSuffix.size()));
  }
  list_again();
}

// Gone: systemd unloads a stopped transient unit once its cgroup is empty.
void SystemdUnits::list_again() {
  int rc = relist_.live() ? 0 : relist_.init(this, uv_timer_init, loop_);
  if (rc == 0) {
    rc = uv_timer_start(relist_.get(), [](uv_timer_t* h) {
      if (auto* self = reactor::owner_of<SystemdUnits>(h)) self->list_units();
    }, kRelistMs, 0);
  }
  if (rc < 0) finish(make_error("io", std::string("the timer that lists the job units again: ") + uv_strerror(rc)));
}

void SystemdUnits::finish(Expected<std::vector<std::string>> result) {
  relist_.close();
  Started done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(result));
}

}  // namespace motor::runner
