// Readiness and health the systemd way: sd_notify READY/STATUS/STOPPING when NOTIFY_SOCKET is
// set, and WATCHDOG=1 pings from the loop when WATCHDOG_USEC is set.
#pragma once

#include <uv.h>

#include <string_view>

#include "reactor/uv_handle.hpp"

namespace motor::runner {

class SystemdNotifier {
 public:
  explicit SystemdNotifier(uv_loop_t* loop);
  void ready(std::string_view status);
  void status(std::string_view status);
  void stopping();

 private:
  reactor::UvHandle<uv_timer_t> watchdog_;
};

}  // namespace motor::runner
