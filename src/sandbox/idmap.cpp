#include "sandbox/idmap.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "motor/sys_error.hpp"

namespace motor::sandbox {
namespace {

// The child only waits for the parent to close the pipe: read and exit, nothing else. It has
// a copy of the fd table, so it closes its own write end first or the read never ends.
int hold_namespace(void* arg) {
  const int* fds = static_cast<int*>(arg);
  close(fds[1]);
  char c;
  (void)!read(fds[0], &c, 1);
  _exit(0);
}

Status write_map(pid_t pid, const char* file, unsigned from, unsigned to) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  const std::string line = std::to_string(from) + " " + std::to_string(to) + " 1\n";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return sys_error("writing " + path);
  }
  return {};
}

}  // namespace

Expected<UniqueFd> idmap_user_namespace(const IdMap& map) {
  if (map.from_uid == 0 || map.to_uid == 0 || map.from_gid == 0 || map.to_gid == 0) {
    return make_error("sandbox", "an idmapped mount never maps root");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  int child_fds[2] = {read_end.get(), write_end.get()};
  std::vector<char> stack(64 * 1024);
  const pid_t pid = clone(hold_namespace, stack.data() + stack.size(), CLONE_NEWUSER | CLONE_VM | SIGCHLD, child_fds);
  if (pid < 0) return sys_error("clone(CLONE_NEWUSER) for an idmapped mount");
  // A mapping is the inside id first: files owned by `from` on disk appear as `to`.
  Status mapped = write_map(pid, "uid_map", map.from_uid, map.to_uid);
  if (mapped) mapped = write_map(pid, "gid_map", map.from_gid, map.to_gid);
  UniqueFd ns;
  if (mapped) {
    ns = UniqueFd(::open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) mapped = sys_error("opening the idmap user namespace");
  }
  write_end.reset();  // the child's read returns: it exits
  int status = 0;
  while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
  }
  if (!mapped) return mapped.error();
  return ns;
}

}  // namespace motor::sandbox
