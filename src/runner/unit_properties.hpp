// StartTransientUnit's properties, a(sv), as sd-bus message appends (the job units,
// job_systemd.hpp; the VM jobs' QEMU units to come). Each returns sd-bus's result:
// negative errno on failure.
#pragma once

#include <systemd/sd-bus.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace motor::runner::unit_property {

int s(sd_bus_message* m, const char* name, const char* value);
int t(sd_bus_message* m, const char* name, uint64_t value);
int b(sd_bus_message* m, const char* name, bool value);
int i(sd_bus_message* m, const char* name, int value);
int h(sd_bus_message* m, const char* name, int fd);
// as: a list of strings (UnsetEnvironment, Environment).
int strings(sd_bus_message* m, const char* name, const std::vector<std::string>& values);
// A CPU set as systemd reads it (AllowedCPUs, CPUAffinity): bit i of byte i/8 is CPU i.
int cpus(sd_bus_message* m, const char* name, const std::vector<int>& cpus);
// ExecStart: one command, argv[0] its path; a failing exit is not ignored.
int exec_start(sd_bus_message* m, const std::vector<std::string>& argv);
// BindPaths / BindReadOnlyPaths, a(ssbt): each source bound at the same path, recursively; a
// missing source fails the start.
int binds(sd_bus_message* m, const char* name, const std::vector<std::string>& paths);
// DeviceAllow, a(ss): (node, "rw" | "r" | ...).
int devices(sd_bus_message* m, const std::vector<std::pair<std::string, std::string>>& allowed);

// What every unit of the runner's has (a job's, a VM job's QEMU).
struct ServiceBasics {
  std::string description;
  std::string user;
  int64_t memory_bytes = 0;  // MemoryMax, and no swap; 0: none
  int64_t pids_max = 0;      // TasksMax; 0: none
  std::vector<int> cpus;     // AllowedCPUs and CPUAffinity; empty: none
};
// Description; Slice=motor-jobs.slice; Type=exec; the limits; User; NoNewPrivileges; an empty
// CapabilityBoundingSet; everything of the unit killed at once with SIGKILL on a kill or stop, no
// SIGHUP; OOMPolicy=continue (an OOM kill ends one process, as in a direct job); unloaded as soon
// as it is dead, also when it failed (gone means its processes are gone).
int service_basics(sd_bus_message* m, const ServiceBasics& basics);

}  // namespace motor::runner::unit_property
