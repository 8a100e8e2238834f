#include "runner/delegated_cgroup.hpp"

#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include <cerrno>

#include "motor/sys_error.hpp"

namespace motor::runner {
namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_value(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) return make_error("cgroup", "writing \"" + value + "\" to " + path + " failed");
  return {};
}

// systemd marks a delegated cgroup with the trusted.delegate (or user.delegate) xattr.
bool delegated(const std::string& dir) {
  char v[4] = {};
  return getxattr(dir.c_str(), "trusted.delegate", v, sizeof v) > 0 || getxattr(dir.c_str(), "user.delegate", v, sizeof v) > 0;
}

}  // namespace

std::string unified_cgroup_path(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    if (line.rfind("0::", 0) == 0) return std::string(line.substr(3));
    pos = eol + 1;
  }
  return "";
}

Expected<std::optional<std::string>> enter_delegated_cgroup(const std::string& cgroup_parent) {
  struct statfs fs {};
  if (statfs(kRoot, &fs) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC) return std::optional<std::string>();  // v1 or hybrid
  const std::string own = unified_cgroup_path(read_all("/proc/self/cgroup"));
  if (own.empty() || own == "/") return std::optional<std::string>();
  const std::string own_dir = kRoot + own;
  if (!delegated(own_dir)) return std::optional<std::string>();
  const std::string leaf = own_dir + "/supervisor";
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return sys_error("mkdir " + leaf);
  if (auto st = write_value(leaf + "/cgroup.procs", std::to_string(getpid())); !st) return st.error();
  // The unit's cgroup now holds no process itself and may hand controllers to its children.
  std::istringstream available(read_all(own_dir + "/cgroup.controllers"));
  for (std::string c; available >> c;) {
    if (c == "memory" || c == "pids" || c == "cpuset" || c == "cpu") {
      if (auto st = write_value(own_dir + "/cgroup.subtree_control", "+" + c); !st) return st.error();
    }
  }
  return std::optional<std::string>(own.substr(1) + "/" + cgroup_parent);
}

}  // namespace motor::runner
