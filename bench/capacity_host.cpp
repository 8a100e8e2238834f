// Host facts and per-process figures from /proc for the capacity bench.
#include "capacity_host.hpp"

#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::bench::capacity {

using motor::test::read_file;

// ---------------------------------------------------------------------------------------------
// Host facts.
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
std::string loadavg() {
  std::istringstream in(read_file("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}
double load1() { return std::atof(read_file("/proc/loadavg").c_str()); }
int64_t meminfo_kib(const char* key) {
  std::istringstream in(read_file("/proc/meminfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0 && line.size() > std::strlen(key) && line[std::strlen(key)] == ':') {
      return std::atoll(line.c_str() + std::strlen(key) + 1);
    }
  }
  return -1;
}
std::string cpu_model() {
  std::istringstream in(read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? "" : trim(line.substr(colon + 2));
    }
  }
  return "unknown";
}
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}
// Busy (non-idle, non-iowait) CPU time of the whole host, in core-seconds.
double host_busy_seconds() {
  std::istringstream in(read_file("/proc/stat"));
  std::string cpu;
  in >> cpu;
  double v[10] = {};
  for (double& x : v) in >> x;
  const double busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}
// One process's own CPU time (utime + stime, not its children's), in seconds.
double process_cpu_seconds(pid_t pid) {
  const std::string text = read_file(fmt::format("/proc/{}/stat", pid));
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(close_paren + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::atof(f.c_str());
    if (i == 15) {
      stime = std::atof(f.c_str());
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}
// The loop thread's (the process's main thread) time on a CPU and time runnable but waiting for
// one, in seconds (/proc/<pid>/schedstat: run ns, run-queue wait ns, timeslices).
std::pair<double, double> sched_run_wait_seconds(pid_t pid) {
  std::istringstream in(read_file(fmt::format("/proc/{}/schedstat", pid)));
  double run = 0, wait = 0;
  in >> run >> wait;
  return {run / 1e9, wait / 1e9};
}
double process_rss_mib(pid_t pid) {
  const std::string text = read_file(fmt::format("/proc/{}/status", pid));
  const size_t at = text.find("\nVmRSS:");
  return at == std::string::npos ? std::nan("") : std::atof(text.c_str() + at + 7) / 1024.0;
}

}  // namespace motor::bench::capacity
