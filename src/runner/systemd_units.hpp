// The systemd backend's side of the bus (job_backend, docs/job-isolation.md "The systemd
// backend"): which backend a config asks for on this host, the leftovers of a runner that was
// killed, and the loop's connection that every job unit is started, watched and killed on
// (job_systemd.hpp).
//
// Two kinds of calls: the start-up ones here (the probe, the recovery) are made before the
// runner listens, on a connection of their own with a 2 s timeout per call; everything on the
// loop's connection is asynchronous (reactor/sd_bus_loop.hpp).
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "motor/expected.hpp"
#include "reactor/sd_bus_loop.hpp"

namespace motor::runner {

// Every job unit is in this slice (made by systemd on first use, under -.slice): the operator
// sees the jobs together (`systemctl status motor-jobs.slice`, `systemd-cgtop`).
inline constexpr const char* kJobSlice = "motor-jobs.slice";
inline constexpr const char* kJobUnitPattern = "motor-job-*.service";
std::string job_unit_name(const std::string& job_id);

// True: Linux jobs run as systemd units. `systemd`: an error ("config") unless systemd's bus
// answers; `auto`: systemd when it is PID 1 (sd_booted) and its bus answers; `direct`: false.
Expected<bool> use_systemd_backend(config::JobBackend wanted);

// Start-up recovery (a runner killed with kill -9 left its units running): every loaded
// motor-job-*.service is killed (SIGKILL to all its processes) and stopped; waits at most 10 s
// for them to be gone. Returns the job ids of the units found.
Expected<std::vector<std::string>> stop_leftover_job_units();

class SystemdUnits {
 public:
  // The loop's connection to the system bus, subscribed to the manager's signals (UnitRemoved,
  // JobRemoved are sent only to subscribers). `entry_path`: motor-unit-entry on the host.
  static Expected<std::unique_ptr<SystemdUnits>> open(uv_loop_t* loop, std::string entry_path);

  reactor::SdBusLoop& bus() { return *bus_; }
  const std::string& entry_path() const { return entry_path_; }

 private:
  SystemdUnits(std::unique_ptr<reactor::SdBusLoop> bus, std::string entry_path)
      : bus_(std::move(bus)), entry_path_(std::move(entry_path)) {}
  std::unique_ptr<reactor::SdBusLoop> bus_;
  std::string entry_path_;
};

}  // namespace motor::runner
