#include "runner/notify.hpp"

#include <systemd/sd-daemon.h>

#include <string>

namespace motor::runner {

SystemdNotifier::SystemdNotifier(uv_loop_t* loop) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    uv_timer_init(loop, watchdog_.get());
    watchdog_.initialized(this);
    // Ping at half the interval: a loop stalled that long is what the watchdog is for.
    const uint64_t every_ms = usec / 2000 > 0 ? usec / 2000 : 1;
    uv_timer_start(watchdog_.get(), [](uv_timer_t*) { sd_notify(0, "WATCHDOG=1"); }, 0, every_ms);
    uv_unref(watchdog_.handle());
  }
}

void SystemdNotifier::ready(std::string_view status) {
  sd_notify(0, ("READY=1\nSTATUS=" + std::string(status)).c_str());
}

void SystemdNotifier::status(std::string_view status) { sd_notify(0, ("STATUS=" + std::string(status)).c_str()); }

void SystemdNotifier::stopping() { sd_notify(0, "STOPPING=1\nSTATUS=stopping"); }

}  // namespace motor::runner
