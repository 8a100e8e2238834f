#include "runner/unit_watch.hpp"

#include "base/log.hpp"

namespace motor::runner {

UnitWatch::~UnitWatch() {
  for (sd_bus_slot* slot : {removed_match_, job_match_, get_unit_slot_}) sd_bus_slot_unref(slot);
}

Status UnitWatch::watch(StartEnded start_ended, Gone gone) {
  start_ended_ = std::move(start_ended);
  on_gone_ = std::move(gone);
  sd_bus* bus = units_.bus().bus();
  const std::string manager = std::string("type='signal',sender='") + kSystemdService + "',path='" + kSystemdManagerPath +
                              "',interface='" + kSystemdManager + "',";
  const std::string removed = manager + "member='UnitRemoved',arg0='" + unit_ + "'";
  const std::string job = manager + "member='JobRemoved',arg2='" + unit_ + "'";
  auto on_removed = [](sd_bus_message*, void* self, sd_bus_error*) -> int {
    static_cast<UnitWatch*>(self)->unit_gone();
    return 0;
  };
  auto on_job = [](sd_bus_message* m, void* self, sd_bus_error*) -> int {
    static_cast<UnitWatch*>(self)->on_job_removed(m);
    return 0;
  };
  if (int r = sd_bus_add_match_async(bus, &removed_match_, removed.c_str(), on_removed, nullptr, this); r < 0) {
    return reactor::sd_bus_failure("watching for the removal of " + unit_, r);
  }
  if (int r = sd_bus_add_match_async(bus, &job_match_, job.c_str(), on_job, nullptr, this); r < 0) {
    return reactor::sd_bus_failure("watching the start job of " + unit_, r);
  }
  return {};
}

void UnitWatch::on_job_removed(sd_bus_message* signal) {
  uint32_t id = 0;
  const char *path = nullptr, *unit = nullptr, *result = nullptr;
  if (sd_bus_message_read(signal, "uoss", &id, &path, &unit, &result) < 0 || !result) return;
  job_match_ = sd_bus_slot_unref(job_match_);  // the start job is the only one the runner asks for
  if (start_ended_) start_ended_(result);
}

void UnitWatch::poll_until_gone(uint64_t period_ms) {
  if (gone_ || poll_.live()) return;
  int rc = poll_.init(this, uv_timer_init, loop_);
  if (rc == 0) {
    rc = uv_timer_start(poll_.get(), [](uv_timer_t* h) {
      if (auto* self = reactor::owner_of<UnitWatch>(h)) self->look_up();
    }, period_ms, period_ms);
  }
  if (auto s = reactor::uv_status(rc, "the timer that looks " + unit_ + " up"); !s) log_warning("{}", s.error().message);
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

}  // namespace motor::runner
