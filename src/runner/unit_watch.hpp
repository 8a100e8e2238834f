// What systemd says on the bus about one transient unit of the runner's (a job's, or a VM job's
// QEMU): the end of its start job (JobRemoved, through SystemdUnits::on_start_job_end) and its removal (UnitRemoved, arg0
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
  // Asks the unit's state every `period_ms` until its start is over, and reports it as the start
  // job's end ("done" once the unit is active, "failed" once it is inactive or failed with no job
  // queued): for a caller that must not depend on JobRemoved alone (a signal can be missed, and
  // nothing else would tell it).
  void poll_until_started(uint64_t period_ms);
  // The service's MainPID (after its start: under Type=exec the exec'd program), answered once;
  // an error where it has none. One question at a time: not while the start is polled.
  using MainPid = std::function<void(Expected<uint32_t>)>;
  void main_pid(MainPid done);
  // Looks the unit up every `period_ms` until it is gone.
  void poll_until_gone(uint64_t period_ms);
  bool gone() const { return gone_; }

 private:
  void start_ended(const std::string& result);
  // Starts `timer` ticking every `period_ms` (a failure is logged: the watch then waits for signals).
  void every(reactor::UvHandle<uv_timer_t>& timer, uint64_t period_ms, uv_timer_cb tick, const std::string& what);
  void ask_state();
  void on_state(sd_bus_message* reply);
  void on_job(sd_bus_message* reply);
  // One property of the unit's org.freedesktop.systemd1.Unit interface, answered to `answer`.
  void ask_unit_property(const char* interface, const char* name, void (UnitWatch::*answer)(sd_bus_message*));
  void on_main_pid(sd_bus_message* reply);
  void look_up();
  void unit_gone();

  uv_loop_t* loop_;
  SystemdUnits& units_;
  std::string unit_;
  StartEnded start_ended_;
  Gone on_gone_;
  MainPid main_pid_done_;
  sd_bus_slot* removed_match_ = nullptr;
  sd_bus_slot* get_unit_slot_ = nullptr;
  sd_bus_slot* state_slot_ = nullptr;
  void (UnitWatch::*state_answer_)(sd_bus_message*) = nullptr;
  reactor::UvHandle<uv_timer_t> poll_, start_poll_;
  bool started_ = false;
  bool gone_ = false;
};

}  // namespace motor::runner
