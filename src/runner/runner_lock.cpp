#include "runner/runner_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include "motor/sys_error.hpp"

namespace motor::runner {

Expected<UniqueFd> lock_state_dir(const std::string& state_dir) {
  const std::string path = state_dir + "/runner.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return sys_error("opening " + path);
  if (flock(fd.get(), LOCK_EX | LOCK_NB) < 0) {
    if (errno != EWOULDBLOCK) return sys_error("locking " + path);
    char buf[32] = {};
    const ssize_t n = pread(fd.get(), buf, sizeof buf - 1, 0);
    const std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?\n");
    return make_error("config", fmt::format("another runner (pid {}) is using the state directory {}; stop it first, "
                                            "or give this one a state directory of its own",
                                            holder.substr(0, holder.find('\n')), state_dir));
  }
  const std::string pid = fmt::format("{}\n", getpid());
  if (ftruncate(fd.get(), 0) < 0 || pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return sys_error("writing " + path);
  }
  return fd;
}

Expected<UniqueFd> lock_cgroup_parent(const std::string& cgroup_root, const std::string& parent) {
  for (const char* h : {"unified", "pids", "memory", "cpuset", "freezer", "cpu", ""}) {
    const std::string dir = *h ? fmt::format("{}/{}/{}", cgroup_root, h, parent) : fmt::format("{}/{}", cgroup_root, parent);
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) continue;
    if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) return sys_error("locking the cgroup parent " + dir);
    return make_error("config", fmt::format("another runner is using the cgroup parent \"{}\" ({}); give this runner "
                                            "a cgroup_parent of its own",
                                            parent, dir));
  }
  return make_error("config", fmt::format("the cgroup parent \"{}\" was not found under {}", parent, cgroup_root));
}

}  // namespace motor::runner
