// What systemd says on the bus about one transient unit of the runner's (a job's, or a VM job's
// QEMU): the end of its start job (JobRemoved, arg2 the unit) and its removal (UnitRemoved, arg0
// the unit; or GetUnit answering NoSuchUnit, looked up now and then in case a signal was missed).
// A gone transient unit (CollectMode=inactive-or-failed) is one whose processes are all gone.
// Everything is asynchronous on the loop's bus connection (systemd_units.hpp); destroying the
// watch drops its matches and pending calls, and no callback runs after.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/systemd_units.hpp"

namespace motor::runner {

class UnitWatch {
 public:
  // The start job's result: "done", "failed", "canceled", ... Runs once.
  using StartEnded = std::function<void(const std::string& result)>;
  // The unit is gone. Runs once.
  using Gone = std::function<void()>;

  UnitWatch(uv_loop_t* loop, SystemdUnits& units, std::string unit) : loop_(loop), units_(units), unit_(std::move(unit)) {}
  ~UnitWatch();
  UnitWatch(const UnitWatch&) = delete;
  UnitWatch& operator=(const UnitWatch&) = delete;

  // Adds the matches: call before the unit's start is sent on the same connection, so that the
  // bus daemon has them first.
  Status watch(StartEnded start_ended, Gone gone);
  // Looks the unit up every `period_ms` until it is gone.
  void poll_until_gone(uint64_t period_ms);
  bool gone() const { return gone_; }

 private:
  void on_job_removed(sd_bus_message* signal);
  void look_up();
  void unit_gone();

  uv_loop_t* loop_;
  SystemdUnits& units_;
  std::string unit_;
  StartEnded start_ended_;
  Gone on_gone_;
  sd_bus_slot* removed_match_ = nullptr;
  sd_bus_slot* job_match_ = nullptr;
  sd_bus_slot* get_unit_slot_ = nullptr;
  reactor::UvHandle<uv_timer_t> poll_;
  bool gone_ = false;
};

}  // namespace motor::runner
