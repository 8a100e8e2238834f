// The systemd backend's side of the bus (job_backend, docs/job-isolation.md "The systemd
// backend"): the loop's connection that every job unit is started, watched and killed on
// (job_systemd.hpp), and the start-up on it: the probe of the manager and the stop of the units
// an earlier runner of this instance left. Every call is asynchronous, answered on the loop
// (reactor/sd_bus_loop.hpp); the runner listens only once the start-up is done.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/sd_bus_loop.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::runner {

// Every job unit is in this slice (made by systemd on first use, under -.slice): the operator
// sees the jobs together (`systemctl status motor-jobs.slice`, `systemd-cgtop`).
inline constexpr const char* kJobSlice = "motor-jobs.slice";

// systemd's manager on the bus.
inline constexpr const char* kSystemdService = "org.freedesktop.systemd1";
inline constexpr const char* kSystemdManagerPath = "/org/freedesktop/systemd1";
inline constexpr const char* kSystemdManager = "org.freedesktop.systemd1.Manager";
// A match rule for the manager's signal `member` ("JobRemoved", "UnitRemoved") on `bus`, plus
// `extra` conditions (",arg0='...'"): the one place its sender, path and interface are spelled.
// A direct connection to systemd (no bus daemon) names no sender: its messages carry none.
std::string manager_signal_match(sd_bus* bus, const std::string& member, const std::string& extra = "");
// The handler of a call whose answer nobody waits for (KillUnit, StopUnit, Subscribe): a failure
// is logged, except NoSuchUnit (the unit is gone already, which is what a kill wants).
int log_bus_failure(sd_bus_message* m, void*, sd_bus_error*);
// KillUnit(all, SIGKILL) and StopUnit(replace), asynchronous (answers: log_bus_failure); a
// negative errno if they could not be queued.
int kill_and_stop_unit(sd_bus* bus, const std::string& unit);

// A runner's instance: 8 hex digits of its state directory's FNV-1a hash. Its job units are
// motor-job-<instance>-<id>.service, so that two runners on one host (the gate's own runner
// beside the service, two state dirs) never stop each other's units at start.
std::string runner_instance(const std::string& state_dir);

class SystemdUnits {
 public:
  // The job ids of this instance's units an earlier runner left (killed and stopped), or why
  // systemd did not answer.
  using Started = std::function<void(Expected<std::vector<std::string>>)>;

  // The loop's connection to the system bus (connecting a local socket does not wait; the Hello
  // is answered on the loop). An error: no bus to connect to. `entry_path`: motor-unit-entry.
  static Expected<std::unique_ptr<SystemdUnits>> open(uv_loop_t* loop, std::string entry_path, std::string instance);
  ~SystemdUnits();
  SystemdUnits(const SystemdUnits&) = delete;
  SystemdUnits& operator=(const SystemdUnits&) = delete;

  // On the loop: the JobRemoved match, Subscribe (UnitRemoved, JobRemoved go only to subscribers), the manager's
  // Version (2 s, the probe), then this instance's loaded units (ListUnitsByPatterns) each killed
  // (SIGKILL to all its processes) and stopped, and listed again every 50 ms until they are gone
  // (10 s at most). `done` runs once, from a bus callback: it must not destroy this object there.
  void start(Started done);

  // StartTransientUnit(unit, "fail", properties, no auxiliary units): `properties` appends the
  // a(sv) entries; `answer` gets systemd's reply on the loop (its slot in *slot).
  Status start_transient(const std::string& unit, const std::function<int(sd_bus_message*)>& properties, sd_bus_slot** slot,
                         sd_bus_message_handler_t answer, void* userdata);

  // The end of `unit`'s start job (JobRemoved's result: "done", "failed", ...), once. One match
  // on JobRemoved serves every unit, dispatched here by name: sd-bus re-checks an argN match
  // itself and only where each argument before N is a string, so a match on JobRemoved's arg2
  // (after a u and an o) never fires (seen in the booted test host). Registering again replaces;
  // forget_start_job drops the handler unrun.
  using StartJobEnded = std::function<void(const std::string& result)>;
  void on_start_job_end(const std::string& unit, StartJobEnded handler);
  void forget_start_job(const std::string& unit) { start_jobs_.erase(unit); }

  reactor::SdBusLoop& bus() { return *bus_; }
  const std::string& entry_path() const { return entry_path_; }
  std::string unit_name(const std::string& job_id) const;

 private:
  SystemdUnits(uv_loop_t* loop, std::unique_ptr<reactor::SdBusLoop> bus, std::string entry_path, std::string instance)
      : loop_(loop), bus_(std::move(bus)), entry_path_(std::move(entry_path)), instance_(std::move(instance)) {}
  Status call(const char* interface, const char* member, const std::function<int(sd_bus_message*)>& append,
              sd_bus_message_handler_t answer);
  void list_units();
  void on_version(sd_bus_message* reply);
  void on_listed(sd_bus_message* reply);
  void list_again();
  void finish(Expected<std::vector<std::string>> result);
  void on_job_removed(sd_bus_message* signal);

  uv_loop_t* loop_;
  std::unique_ptr<reactor::SdBusLoop> bus_;
  std::string entry_path_, instance_;
  Started done_;
  sd_bus_slot* call_slot_ = nullptr;  // the start-up call waiting for its answer
  sd_bus_slot* job_removed_match_ = nullptr;
  std::unordered_map<std::string, StartJobEnded> start_jobs_;
  std::vector<std::string> leftover_ids_;
  bool stopping_ = false;
  uint64_t give_up_at_ms_ = 0;
  reactor::UvHandle<uv_timer_t> relist_;
};

}  // namespace motor::runner
