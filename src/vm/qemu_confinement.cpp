#include "vm/qemu_confinement.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "motor/sys_error.hpp"

#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#define PR_SCHED_CORE_GET 0
#define PR_SCHED_CORE_CREATE 1
#endif
#ifndef PIDTYPE_TGID
#define PIDTYPE_TGID 1
#endif

namespace motor::vm {
namespace {

// Undoes the pids cgroup made a moment ago when QEMU could not be put into it (it holds nothing).
Status remove_new_pids_cgroup(const std::string& dir) {
  if (dir.empty()) return {};
  if (rmdir(dir.c_str()) < 0 && errno != ENOENT) return sys_error("removing " + dir);
  return {};
}

Expected<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("vm", "cannot read " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_text(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return sys_error("opening " + path);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return make_error("vm", "writing " + path + ": " + std::strerror(err));
  return {};
}

}  // namespace

const std::vector<std::string>& libvirt_qemu_environment_names() {
  static const std::vector<std::string> names = {"LC_ALL", "PATH", "HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
                                                 "XDG_CONFIG_HOME", "USER", "LOGNAME", "QEMU_AUDIO_DRV",
                                                 "SDL_AUDIODRIVER"};
  return names;
}

std::vector<std::string> parse_net_dev_interfaces(const std::string& net_dev) {
  std::vector<std::string> names;
  std::istringstream in(net_dev);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (++n <= 2) continue;  // two header lines
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    names.push_back(name);
  }
  return names;
}

std::string cgroup_path_of(const std::string& proc_cgroup, const std::string& controller) {
  std::istringstream in(proc_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1);
    if (controller.empty()) {
      if (line.compare(0, a, "0") == 0 && ctrls.empty()) return line.substr(b + 1);
      continue;
    }
    std::istringstream cs(ctrls);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == controller) return line.substr(b + 1);
    }
  }
  return {};
}

bool core_scheduling_available() {
  unsigned long cookie = 0;
  return prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET, 0, PIDTYPE_TGID, &cookie) == 0;
}

namespace {

// The account: every uid and gid (real, effective, saved, filesystem).
Status check_account(const QemuConfinementSpec& spec, const std::string& proc) {
  auto status = slurp(proc + "/status");
  if (!status) return status.error();
  for (const char* key : {"Uid:", "Gid:"}) {
    const auto at = status->find(std::string("\n") + key);
    if (at == std::string::npos) return make_error("vm", "QEMU's status has no " + std::string(key));
    std::istringstream ids(status->substr(at + 1 + std::strlen(key), status->find('\n', at + 1) - at - 1 - std::strlen(key)));
    const unsigned want = key[0] == 'U' ? spec.uid : spec.gid;
    unsigned id = 0;
    int count = 0;
    while (ids >> id) {
      ++count;
      if (id != want) return make_error("vm", "QEMU runs with " + std::string(key) + " " + std::to_string(id) + ", not the QEMU account's " + std::to_string(want));
    }
    if (count != 4) return make_error("vm", "QEMU's " + std::string(key) + " line is malformed");
  }
  return {};
}

// The network namespace: nothing but lo.
Status check_network(const std::string& proc, QemuConfinement& c) {
  auto net_dev = slurp(proc + "/net/dev");
  if (!net_dev) return net_dev.error();
  c.interfaces = parse_net_dev_interfaces(*net_dev);
  for (const auto& name : c.interfaces) {
    if (name != "lo") return make_error("vm", "QEMU's network namespace has interface \"" + name + "\" (only lo is allowed): run libvirtd in an empty network namespace");
  }
  return {};
}

// The environment: only what QEMU's launcher sets.
Status check_environment(const QemuConfinementSpec& spec, const std::string& proc) {
  auto environ = slurp(proc + "/environ");
  if (!environ) return environ.error();
  size_t start = 0;
  while (start < environ->size()) {
    size_t end = environ->find('\0', start);
    if (end == std::string::npos) end = environ->size();
    const std::string entry = environ->substr(start, end - start);
    const std::string name = entry.substr(0, entry.find('='));
    bool known = false;
    for (const auto& n : spec.environment_names) known = known || n == name;
    if (!known && !entry.empty()) {
      return make_error("vm", "QEMU's environment holds \"" + name.substr(0, 64) + "\", which its launcher does not set");
    }
    start = end + 1;
  }
  return {};
}

// Memory: the hard limit is in force on QEMU's memory cgroup (v1, or the unified one on v2).
Status check_memory_limit(const QemuConfinementSpec& spec, const std::string& proc, QemuConfinement& c) {
  auto cgroups = slurp(proc + "/cgroup");
  if (!cgroups) return cgroups.error();
  std::string mem = cgroup_path_of(*cgroups, "memory");
  std::string limit_file;
  if (!mem.empty()) {
    c.memory_cgroup_dir = spec.cgroup_root + "/memory" + mem;
    limit_file = c.memory_cgroup_dir + "/memory.limit_in_bytes";
  } else {
    c.memory_cgroup_dir = spec.cgroup_root + cgroup_path_of(*cgroups, "");
    limit_file = c.memory_cgroup_dir + "/memory.max";
  }
  // libvirt may put QEMU's threads in sub-cgroups (emulator, vcpuN); the limit sits on the domain's.
  for (const char* sub : {"/emulator", "/vcpu0"}) {
    const std::string suffix = sub;
    if (c.memory_cgroup_dir.size() > suffix.size() &&
        c.memory_cgroup_dir.compare(c.memory_cgroup_dir.size() - suffix.size(), suffix.size(), suffix) == 0) {
      c.memory_cgroup_dir.resize(c.memory_cgroup_dir.size() - suffix.size());
      limit_file = c.memory_cgroup_dir + limit_file.substr(limit_file.rfind('/'));
    }
  }
  auto limit_text = slurp(limit_file);
  if (!limit_text) return make_error("vm", "QEMU's memory limit cannot be read (" + limit_text.error().message + "): refusing to run it unlimited");
  const long long limit = std::atoll(limit_text->c_str());
  if (limit <= 0 || limit > spec.hard_limit_bytes) {
    return make_error("vm", "QEMU's memory cgroup limit is " + std::to_string(limit) + " bytes, not the hard limit of " + std::to_string(spec.hard_limit_bytes));
  }
  return {};
}

// Pids under a unit's TasksMax: the limit is in force on QEMU's own pids cgroup (v1, or the
// unified one on v2), no higher than the job's.
Status check_pids_limit(const QemuConfinementSpec& spec, const std::string& proc, QemuConfinement& c) {
  auto cgroups = slurp(proc + "/cgroup");
  if (!cgroups) return cgroups.error();
  const std::string v1 = cgroup_path_of(*cgroups, "pids");
  c.pids_limit_file = v1.empty() ? spec.cgroup_root + cgroup_path_of(*cgroups, "") + "/pids.max"
                                 : spec.cgroup_root + "/pids" + v1 + "/pids.max";
  auto text = slurp(c.pids_limit_file);
  if (!text) return make_error("vm", "QEMU's pids limit cannot be read (" + text.error().message + "): refusing to run it unlimited");
  const long long limit = std::atoll(text->c_str());
  if (text->rfind("max", 0) == 0 || limit <= 0 || limit > spec.pids_max) {
    return make_error("vm", "QEMU's pids limit is " + text->substr(0, text->find('\n')) + ", not the job's " + std::to_string(spec.pids_max));
  }
  return {};
}

// Pids: a cgroup of our own in the v1 pids hierarchy (QEMU's other hierarchies stay libvirt's).
Status limit_pids(const QemuConfinementSpec& spec, QemuConfinement& c) {
  const std::string pids_root = spec.cgroup_root + "/pids";
  struct stat st {};
  if (stat(pids_root.c_str(), &st) != 0) {
    c.pids_limit_file = c.memory_cgroup_dir + "/pids.max";
    // cgroup v2: one hierarchy; the pids limit goes on the domain's own cgroup, libvirt's.
    if (auto s = write_text(c.memory_cgroup_dir + "/pids.max", std::to_string(spec.pids_max)); !s) {
      return make_error("vm", "cannot set QEMU's pids limit: " + s.error().message);
    }
    return {};
  }
  c.pids_cgroup_dir = pids_root + "/" + spec.pids_cgroup;
  c.pids_limit_file = c.pids_cgroup_dir + "/pids.max";
  const std::string parent = c.pids_cgroup_dir.substr(0, c.pids_cgroup_dir.rfind('/'));
  if (mkdir(parent.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("creating " + parent);
  if (mkdir(c.pids_cgroup_dir.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("creating " + c.pids_cgroup_dir);
  if (auto s = write_text(c.pids_cgroup_dir + "/pids.max", std::to_string(spec.pids_max)); !s) {
    (void)remove_new_pids_cgroup(c.pids_cgroup_dir);
    return make_error("vm", "cannot set QEMU's pids limit: " + s.error().message);
  }
  if (auto s = write_text(c.pids_cgroup_dir + "/cgroup.procs", std::to_string(spec.pid)); !s) {
    (void)remove_new_pids_cgroup(c.pids_cgroup_dir);
    return make_error("vm", "cannot put QEMU into its pids cgroup: " + s.error().message);
  }
  return {};
}

}  // namespace

Expected<QemuConfinement> confine_qemu(const QemuConfinementSpec& spec) {
  QemuConfinement c;
  const std::string proc = "/proc/" + std::to_string(spec.pid);
  if (auto s = check_account(spec, proc); !s) return s.error();
  if (auto s = check_network(proc, c); !s) return s.error();
  if (auto s = check_environment(spec, proc); !s) return s.error();
  if (auto s = check_memory_limit(spec, proc, c); !s) return s.error();
  if (auto s = spec.pids_limited_by_launcher ? check_pids_limit(spec, proc, c) : limit_pids(spec, c); !s) return s.error();
  // Core scheduling: a cookie of its own, so no other task shares a core's siblings with it.
  if (prctl(PR_SCHED_CORE, PR_SCHED_CORE_CREATE, spec.pid, PIDTYPE_TGID, 0) == 0) {
    c.core_scheduling = true;
  } else if (errno != EINVAL && errno != ENODEV) {
    return sys_error("giving QEMU a core-scheduling cookie");
  }
  return c;
}

}  // namespace motor::vm
