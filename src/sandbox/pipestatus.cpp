#include "sandbox/pipestatus.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "motor/unique_fd.hpp"
#include "sandbox/init/init_report.hpp"

namespace motor::sandbox {

std::optional<std::vector<int>> pipestatus_from_init_name(const std::string& comm) {
  init_report::Statuses s;
  if (!init_report::parse_name(comm, s)) return std::nullopt;
  return std::vector<int>(s.value, s.value + s.count);
}

bool pipestatus_reportable(const std::vector<int>& statuses, int exit_code) {
  init_report::Statuses s;
  if (statuses.size() > static_cast<size_t>(init_report::kMaxStatuses)) return false;
  for (int v : statuses) s.value[s.count++] = v;
  return init_report::reportable(s, exit_code);
}

int init_signal_from_name(const std::string& comm) {
  int sig = 0;
  char end = 0;
  if (std::sscanf(comm.c_str(), "motor-init:s%d%c", &sig, &end) != 2 || end != '\n' || sig <= 0 || sig >= NSIG) return 0;
  return sig;
}

InitReport read_init_report(pid_t init_pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(init_pid));
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  char name[32] = {};
  if (!fd) return {};
  const ssize_t n = ::read(fd.get(), name, sizeof name - 1);
  if (n <= 0) return {};
  const std::string comm(name, static_cast<size_t>(n));
  return InitReport{init_signal_from_name(comm), pipestatus_from_init_name(comm)};
}

std::string command_reporting_pipestatus(const std::string& command) {
  return init_report::kBashExitTrap + command;
}

}  // namespace motor::sandbox
