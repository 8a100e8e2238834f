// Detects the host's cgroup layout from /proc/self/mountinfo and picks a driver: pure v2, the
// hybrid layout (v1 controllers, cgroup2 for clone3/kill/events) or pure v1. Also holds the small
// file helpers both drivers use.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "motor/sys_error.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/cgroup_internal.hpp"

namespace motor::sandbox {
namespace cgroup_detail {

Expected<std::string> read_text(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status write_text(const std::string& path, std::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return sys_error("write '" + std::string(value) + "' to " + path);
  if (static_cast<size_t>(n) != value.size())
    return make_error("io", "short write of '" + std::string(value) + "' to " + path);
  return {};
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Expected<bool> make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;
    return make_error("io", "mkdir " + path + ": exists and is not a directory");
  }
  return sys_error("mkdir " + path);
}

Status remove_dir(const std::string& path) {
  // A cgroup whose last process just exited can stay busy for a moment; retry briefly (at most
  // about 100 ms) so a caller that kills, confirms and removes is not failed by that window.
  constexpr int kAttempts = 20;
  for (int attempt = 0;; ++attempt) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return {};
    if (errno != EBUSY || attempt + 1 >= kAttempts) return sys_error("rmdir " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<std::string> list_subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (e->d_type == DT_DIR || (e->d_type == DT_UNKNOWN && exists(dir + "/" + n + "/cgroup.procs")))
      out.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Expected<UniqueFd> open_dir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  return fd;
}

Expected<UniqueFd> open_write(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  return fd;
}

std::optional<int64_t> keyed_value(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      std::string_view num = line.substr(key.size() + 1);
      int64_t v = 0;
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (ec == std::errc()) return v;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

Expected<std::vector<pid_t>> read_pids(const std::string& procs_path) {
  auto text = read_text(procs_path);
  if (!text) return text.error();
  std::vector<pid_t> pids;
  for (const auto& w : words(*text)) {
    pid_t p = 0;
    auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), p);
    if (ec == std::errc() && p > 0) pids.push_back(p);
  }
  return pids;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':' ||
           c == '@' || c == '+';
  });
}

Expected<bool> v2_populated(const std::string& dir) {
  const std::string path = dir + "/cgroup.events";
  auto text = read_text(path);
  if (!text) return text.error();
  auto v = keyed_value(*text, "populated");
  if (!v) return make_error("io", path + ": no 'populated' line");
  return *v != 0;
}

Status v2_kill(const std::string& dir) {
  const std::string path = dir + "/cgroup.kill";
  if (!exists(path))
    return make_error("io", path + " is missing: the kernel is older than 5.14 and cannot kill a cgroup");
  return write_text(path, "1");
}

}  // namespace cgroup_detail

namespace {

using namespace cgroup_detail;

struct Mount {
  std::string point;
  std::string fstype;
  std::vector<std::string> super_options;
};

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 2])) && std::isdigit(static_cast<unsigned char>(s[i + 3]))) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Expected<std::vector<Mount>> cgroup_mounts(const std::string& root) {
  auto text = read_text("/proc/self/mountinfo");
  if (!text) return text.error();
  std::string prefix = root;
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  std::vector<Mount> out;
  for (const auto& line : split(*text, '\n')) {
    auto f = words(line);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 7 || dash == f.end() || f.end() - dash < 4) continue;
    Mount m;
    m.point = unescape(f[4]);
    m.fstype = *(dash + 1);
    if (m.fstype != "cgroup" && m.fstype != "cgroup2") continue;
    m.super_options = split(*(dash + 3), ',');
    const bool under = m.point == prefix || prefix == "/" ||
                       (m.point.size() > prefix.size() && m.point.compare(0, prefix.size(), prefix) == 0 &&
                        m.point[prefix.size()] == '/');
    if (under) out.push_back(std::move(m));
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

}  // namespace

Expected<std::unique_ptr<CgroupDriver>> detect_cgroups(const std::string& parent, CgroupPreference preference,
                                                       const std::string& root) {
  if (!valid_name(parent))
    return make_error("config", "cgroup parent name '" + parent + "' is not a single plain path component");
  auto mounts = cgroup_mounts(root);
  if (!mounts) return mounts.error();

  std::string unified;
  std::map<std::string, V1Hierarchy> v1;  // controller -> hierarchy (first mount wins)
  static const std::set<std::string> kWanted = {"memory", "pids", "cpuset", "freezer"};
  for (const auto& m : *mounts) {
    if (m.fstype == "cgroup2") {
      if (unified.empty()) unified = m.point;
      continue;
    }
    V1Hierarchy h{m.point, {}};
    for (const auto& o : m.super_options)
      if (kWanted.count(o) != 0) h.controllers.push_back(o);
    for (const auto& c : h.controllers)
      if (v1.count(c) == 0) v1[c] = h;
  }

  std::vector<std::string> v2_controllers;
  if (!unified.empty()) {
    auto text = read_text(unified + "/cgroup.controllers");
    if (!text) return text.error();
    v2_controllers = words(*text);
  }
  auto v2_has = [&](const std::string& c) {
    return std::find(v2_controllers.begin(), v2_controllers.end(), c) != v2_controllers.end();
  };
  auto v1_missing = [&](std::vector<std::string> need) {
    std::vector<std::string> missing;
    for (const auto& c : need)
      if (v1.count(c) == 0) missing.push_back(c);
    return missing;
  };
  const std::vector<std::string> kLimits = {"memory", "pids", "cpuset"};

  switch (preference) {
    case CgroupPreference::kV2: {
      if (unified.empty()) return make_error("config", "cgroup v2 was required but no cgroup2 is mounted under " + root);
      std::vector<std::string> missing;
      for (const auto& c : kLimits)
        if (!v2_has(c)) missing.push_back(c);
      if (!missing.empty()) {
        std::string where;
        for (const auto& c : missing)
          if (v1.count(c) != 0) where += " " + c + "@" + v1[c].mount;
        return make_error("config", "cgroup v2 was required but " + unified + "/cgroup.controllers lacks: " +
                                        join(missing) +
                                        (where.empty() ? "" : " (bound to cgroup v1 hierarchies:" + where + ")"));
      }
      return make_v2_driver(unified, parent);
    }
    case CgroupPreference::kV1: {
      auto missing = v1_missing({"memory", "pids", "cpuset", "freezer"});
      if (!missing.empty())
        return make_error("config", "cgroup v1 was required but no v1 hierarchy under " + root +
                                        " has the controllers: " + join(missing));
      return make_v1_driver(v1, "", parent);
    }
    case CgroupPreference::kAuto:
      break;
  }
  if (!unified.empty() && v2_has("memory")) return make_v2_driver(unified, parent);
  if (!unified.empty() && v1_missing(kLimits).empty()) return make_v1_driver(v1, unified, parent);
  if (v1_missing({"memory", "pids", "cpuset", "freezer"}).empty()) return make_v1_driver(v1, "", parent);
  std::string found = unified.empty() ? "no cgroup2 mount" : "cgroup2 at " + unified + " with controllers [" +
                                                                 join(v2_controllers) + "]";
  std::vector<std::string> v1_found;
  for (const auto& [c, h] : v1) v1_found.push_back(c);
  return make_error("config", "no usable cgroup layout under " + root + ": " + found + "; v1 controllers [" +
                                  join(v1_found) + "]; need memory, pids and cpuset on v2, or on v1 (plus freezer "
                                  "when there is no cgroup2)");
}

}  // namespace motor::sandbox
