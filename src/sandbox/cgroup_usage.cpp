#include "sandbox/cgroup_usage.hpp"

#include <unistd.h>

#include <charconv>
#include <string_view>

#include "base/atomic_file.hpp"

namespace motor::sandbox {
namespace {

std::optional<int64_t> to_int(std::string_view text) {
  int64_t v = 0;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// "name value" lines (cpu.stat, cpuacct.stat).
std::optional<int64_t> keyed(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t space = line.find(' ');
    if (space != std::string_view::npos && line.substr(0, space) == key) return to_int(line.substr(space + 1));
  }
  return std::nullopt;
}

}  // namespace

CgroupUsage read_cgroup_usage(const std::vector<std::string>& directories) {
  CgroupUsage u;
  const int64_t ticks = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
  // The CPU figures from the last directory that has them: the unified one, which comes last in
  // the hybrid layout and always has cpu.stat; each file looked for that is missing is a kernfs
  // lookup on the loop.
  for (auto dir = directories.rbegin(); dir != directories.rend() && !u.cpu_user_us; ++dir) {
    if (auto stat = read_small_file(*dir + "/cpu.stat")) {  // v2 (always there, controller or not)
      u.cpu_user_us = keyed(*stat, "user_usec");
      u.cpu_system_us = keyed(*stat, "system_usec");
      break;
    }
    if (auto acct = read_small_file(*dir + "/cpuacct.stat")) {  // v1, in clock ticks
      if (auto user = keyed(*acct, "user")) u.cpu_user_us = *user * 1000000 / ticks;
      if (auto sys = keyed(*acct, "system")) u.cpu_system_us = *sys * 1000000 / ticks;
    }
  }
  // The memory peak from the first (v1's memory hierarchy comes first).
  for (const auto& dir : directories) {
    if (auto max = read_small_file(dir + "/memory.max_usage_in_bytes")) {  // v1
      u.memory_peak_bytes = to_int(*max);
    } else if (auto peak = read_small_file(dir + "/memory.peak")) {  // v2
      u.memory_peak_bytes = to_int(*peak);
    }
    if (u.memory_peak_bytes) break;
  }
  return u;
}

}  // namespace motor::sandbox
