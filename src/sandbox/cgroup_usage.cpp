#include "sandbox/cgroup_usage.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string_view>

#include "motor/unique_fd.hpp"

namespace motor::sandbox {
namespace {

// The whole of a small cgroup file, or nothing if it cannot be read. Plain open/read: a job's
// end reads these on the loop, where iostreams cost several times the kernel's own work.
std::optional<std::string> slurp(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (size_t{1} << 20)) return std::nullopt;  // no usage file is this long
  }
}

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
    if (auto stat = slurp(*dir + "/cpu.stat")) {  // v2 (always there, controller or not)
      u.cpu_user_us = keyed(*stat, "user_usec");
      u.cpu_system_us = keyed(*stat, "system_usec");
      break;
    }
    if (auto acct = slurp(*dir + "/cpuacct.stat")) {  // v1, in clock ticks
      if (auto user = keyed(*acct, "user")) u.cpu_user_us = *user * 1000000 / ticks;
      if (auto sys = keyed(*acct, "system")) u.cpu_system_us = *sys * 1000000 / ticks;
    }
  }
  // The memory peak from the first (v1's memory hierarchy comes first).
  for (const auto& dir : directories) {
    if (auto max = slurp(dir + "/memory.max_usage_in_bytes")) {  // v1
      u.memory_peak_bytes = to_int(*max);
    } else if (auto peak = slurp(dir + "/memory.peak")) {  // v2
      u.memory_peak_bytes = to_int(*peak);
    }
    if (u.memory_peak_bytes) break;
  }
  return u;
}

}  // namespace motor::sandbox
