#include "runner/unit_watch.hpp"

#include <cstdlib>
#include <string_view>

#include "base/log.hpp"

namespace motor::runner {
namespace {
constexpr const char* kUnitInterface = "org.freedesktop.systemd1.Unit";
}  // namespace

UnitWatch::~UnitWatch() {
  for (sd_bus_slot* slot : {removed_match_, get_unit_slot_, state_slot_}) sd_bus_slot_unref(slot);
  units_.forget_start_job(unit_);
}

Status UnitWatch::watch(StartEnded start_ended, Gone gone) {
  start_ended_ = std::move(start_ended);
  on_gone_ = std::move(gone);
  sd_bus* bus = units_.bus().bus();
  const std::string removed = manager_signal_match(bus, "UnitRemoved", ",arg0='" + unit_ + "'");
  auto on_removed = [](sd_bus_message*, void* self, sd_bus_error*) -> int {
    static_cast<UnitWatch*>(self)->unit_gone();
    return 0;
  };
  if (int r = sd_bus_add_match_async(bus, &removed_match_, removed.c_str(), on_removed, nullptr, this); r < 0) {
    return reactor::sd_bus_failure("watching for the removal of " + unit_, r);
  }
  units_.on_start_job_end(unit_, [this](const std::string& result) { this->start_ended(result); });
  return {};
}

void UnitWatch::start_ended(const std::string& result) {
  if (started_) return;
  started_ = true;
  units_.forget_start_job(unit_);
  state_slot_ = sd_bus_slot_unref(state_slot_);
  start_poll_.close();
  if (start_ended_) start_ended_(result);
}

void UnitWatch::poll_until_started(uint64_t period_ms) {
  if (started_ || start_poll_.live()) return;
  every(start_poll_, period_ms, [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<UnitWatch>(h)) self->ask_state();
  }, "the timer that asks for the state of " + unit_);
}

void UnitWatch::every(reactor::UvHandle<uv_timer_t>& timer, uint64_t period_ms, uv_timer_cb tick, const std::string& what) {
  int rc = timer.init(this, uv_timer_init, loop_);
  if (rc == 0) rc = uv_timer_start(timer.get(), tick, period_ms, period_ms);
  if (auto s = reactor::uv_status(rc, what); !s) log_warning("{}", s.error().message);
}

void UnitWatch::ask_unit_property(const char* interface, const char* name, void (UnitWatch::*answer)(sd_bus_message*)) {
  state_answer_ = answer;
  char* path = nullptr;
  int r = sd_bus_path_encode("/org/freedesktop/systemd1/unit", unit_.c_str(), &path);
  if (r >= 0) {
    r = sd_bus_call_method_async(
        units_.bus().bus(), &state_slot_, kSystemdService, path, "org.freedesktop.DBus.Properties", "Get",
        [](sd_bus_message* reply, void* userdata, sd_bus_error*) -> int {
          auto* self = static_cast<UnitWatch*>(userdata);
          self->state_slot_ = sd_bus_slot_unref(self->state_slot_);
          (self->*self->state_answer_)(reply);
          return 0;
        },
        this, "ss", interface, name);
  }
  free(path);
  if (r < 0) log_warning("{}", reactor::sd_bus_failure(std::string("asking for the ") + name + " of " + unit_, r).message);
  units_.bus().update();
}

void UnitWatch::ask_state() {
  if (!started_ && !state_slot_) ask_unit_property(kUnitInterface, "ActiveState", &UnitWatch::on_state);
}

void UnitWatch::on_state(sd_bus_message* reply) {
  const char* state = nullptr;
  if (sd_bus_message_is_method_error(reply, nullptr) || sd_bus_message_read(reply, "v", "s", &state) < 0 || !state) return;
  const std::string_view active(state);
  if (active == "active") return start_ended("done");
  if (active != "inactive" && active != "failed") return;  // activating, reloading, deactivating: ask again
  // Inactive: either the start job has not run yet, or it ran and the unit did not start.
  ask_unit_property(kUnitInterface, "Job", &UnitWatch::on_job);
}

void UnitWatch::on_job(sd_bus_message* reply) {
  uint32_t job = 0;
  const char* path = nullptr;
  if (sd_bus_message_is_method_error(reply, nullptr) || sd_bus_message_read(reply, "v", "(uo)", &job, &path) < 0) return;
  if (job == 0) start_ended("failed");
}

void UnitWatch::poll_until_gone(uint64_t period_ms) {
  if (gone_ || poll_.live()) return;
  every(poll_, period_ms, [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<UnitWatch>(h)) self->look_up();
  }, "the timer that looks " + unit_ + " up");
}

void UnitWatch::look_up() {
  if (gone_ || get_unit_slot_) return;
  const int r = sd_bus_call_method_async(
      units_.bus().bus(), &get_unit_slot_, kSystemdService, kSystemdManagerPath, kSystemdManager, "GetUnit",
      [](sd_bus_message* reply, void* userdata, sd_bus_error*) -> int {
        auto* self = static_cast<UnitWatch*>(userdata);
        self->get_unit_slot_ = sd_bus_slot_unref(self->get_unit_slot_);
        if (sd_bus_error_has_name(sd_bus_message_get_error(reply), "org.freedesktop.systemd1.NoSuchUnit")) self->unit_gone();
        return 0;
      },
      this, "s", unit_.c_str());
  if (r < 0) log_warning("{}", reactor::sd_bus_failure("GetUnit " + unit_, r).message);
  units_.bus().update();
}

void UnitWatch::unit_gone() {
  if (gone_) return;
  gone_ = true;
  poll_.close();
  if (on_gone_) on_gone_();
}


void UnitWatch::main_pid(MainPid done) {
  main_pid_done_ = std::move(done);
  ask_unit_property("org.freedesktop.systemd1.Service", "MainPID", &UnitWatch::on_main_pid);
}

void UnitWatch::on_main_pid(sd_bus_message* reply) {
  MainPid done = std::move(main_pid_done_);
  main_pid_done_ = nullptr;
  if (!done) return;
  uint32_t pid = 0;
  if (sd_bus_message_is_method_error(reply, nullptr) || sd_bus_message_read(reply, "v", "u", &pid) < 0 || pid <= 1) {
    return done(make_error("io", "no main process in " + unit_ + " (journalctl -u " + unit_ + ")"));
  }
  done(pid);
}

}  // namespace motor::runner
