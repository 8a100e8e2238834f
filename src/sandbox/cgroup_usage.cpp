#include "sandbox/cgroup_usage.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace motor::sandbox {
namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int64_t> to_int(std::string_view text) {
  int64_t v = 0;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// "name value" lines (cpu.stat, cpuacct.stat).
std::optional<int64_t> keyed(const std::string& text, std::string_view key) {
  std::istringstream lines(text);
  std::string name, value;
  while (lines >> name >> value) {
    if (name == key) return to_int(value);
  }
  return std::nullopt;
}

}  // namespace

CgroupUsage read_cgroup_usage(const std::vector<std::string>& directories) {
  CgroupUsage u;
  const int64_t ticks = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
  for (const auto& dir : directories) {
    if (!u.cpu_user_us) {
      if (auto stat = slurp(dir + "/cpu.stat")) {  // v2 (always there, controller or not)
        u.cpu_user_us = keyed(*stat, "user_usec");
        u.cpu_system_us = keyed(*stat, "system_usec");
      } else if (auto acct = slurp(dir + "/cpuacct.stat")) {  // v1, in clock ticks
        if (auto user = keyed(*acct, "user")) u.cpu_user_us = *user * 1000000 / ticks;
        if (auto sys = keyed(*acct, "system")) u.cpu_system_us = *sys * 1000000 / ticks;
      }
    }
    if (!u.memory_peak_bytes) {
      if (auto peak = slurp(dir + "/memory.peak")) u.memory_peak_bytes = to_int(*peak);
      else if (auto max = slurp(dir + "/memory.max_usage_in_bytes")) u.memory_peak_bytes = to_int(*max);
    }
  }
  return u;
}

}  // namespace motor::sandbox
