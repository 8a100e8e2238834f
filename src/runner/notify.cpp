#include "runner/notify.hpp"

#include <systemd/sd-daemon.h>

#include <string>

#include "base/log.hpp"

namespace motor::runner {

SystemdNotifier::SystemdNotifier(uv_loop_t* loop) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    // Ping at half the interval: a loop stalled that long is what the watchdog is for. Without
    // the timer systemd's watchdog ends the runner, as it would a stalled one.
    const uint64_t every_ms = usec / 2000 > 0 ? usec / 2000 : 1;
    int rc = watchdog_.init(this, uv_timer_init, loop);
    if (rc == 0) rc = uv_timer_start(watchdog_.get(), [](uv_timer_t*) { sd_notify(0, "WATCHDOG=1"); }, 0, every_ms);
    if (auto s = reactor::uv_status(rc, "the watchdog timer"); !s) {
      log_error("{}; systemd's watchdog will end the runner", s.error().message);
      return;
    }
    uv_unref(watchdog_.handle());
  }
}

void SystemdNotifier::ready(std::string_view status) {
  sd_notify(0, ("READY=1\nSTATUS=" + std::string(status)).c_str());
}

void SystemdNotifier::status(std::string_view status) { sd_notify(0, ("STATUS=" + std::string(status)).c_str()); }

void SystemdNotifier::stopping() { sd_notify(0, "STOPPING=1\nSTATUS=stopping"); }

}  // namespace motor::runner
