// Host facts and per-process figures from /proc, for the capacity bench (capacity_host.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>

namespace motor::bench::capacity {

std::string trim(std::string s);
std::string loadavg();  // "1 5 15" minute load averages
double load1();
int64_t meminfo_kib(const char* key);  // a /proc/meminfo field, -1 if absent
std::string cpu_model();
int affinity_cpus();
// Busy (non-idle, non-iowait) CPU time of the whole host, in core-seconds.
double host_busy_seconds();
// One process's own CPU time (utime + stime, not its children's), in seconds.
double process_cpu_seconds(pid_t pid);
// The loop thread's time on a CPU and time runnable but waiting for one, in seconds.
std::pair<double, double> sched_run_wait_seconds(pid_t pid);
double process_rss_mib(pid_t pid);

}  // namespace motor::bench::capacity
