// JobCgroup::adopt: a process moved into the cgroup by writing its pid to cgroup.procs.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"
#include "sandbox/cgroup.hpp"

namespace motor::sandbox {

Status JobCgroup::adopt(pid_t pid) {
  const std::string text = std::to_string(pid);
  auto write_pid = [&text](int fd, const char* what) -> Status {
    if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return sys_error(std::string("moving a process into the job's cgroup (") + what + ")");
    }
    return {};
  };
  for (int fd : child_attach_fds()) {
    if (auto s = write_pid(fd, "a v1 hierarchy's cgroup.procs"); !s) return s;
  }
  if (clone_into_fd() >= 0) {
    UniqueFd procs(openat(clone_into_fd(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!procs) return sys_error("opening the job's cgroup.procs");
    if (auto s = write_pid(procs.get(), "cgroup.procs"); !s) return s;
  }
  return {};
}

}  // namespace motor::sandbox
