#include "sandbox/user_namespace.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "motor/sys_error.hpp"

namespace motor::sandbox {
namespace {

// No allocation: the child only makes system calls.
int write_proc_file(const char* path, const char* text, size_t size, const char* stage_text, const char*& stage) {
  stage = stage_text;
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = ::write(fd, text, size);
  const int err = n == static_cast<ssize_t>(size) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return err;
}

}  // namespace

Expected<UserNamespacePlan> plan_user_namespace(uid_t uid, gid_t gid) {
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0) return sys_error("getresuid");
  if (ruid != uid || euid != uid || suid != uid || rgid != gid || egid != gid || sgid != gid) {
    return make_error("config", "a sandbox in its own user namespace is built by the job account itself: this process runs as uid " +
                                    std::to_string(euid) + " gid " + std::to_string(egid) + ", the job account is uid " +
                                    std::to_string(uid) + " gid " + std::to_string(gid));
  }
  const int count = getgroups(0, nullptr);
  if (count < 0) return sys_error("getgroups");
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (count > 0 && getgroups(count, groups.data()) < 0) return sys_error("getgroups");
  for (gid_t g : groups) {
    if (g != gid) {
      return make_error("config", "the job account is in supplementary group " + std::to_string(g) +
                                      ", which a job in its own user namespace could not drop");
    }
  }
  return UserNamespacePlan{std::to_string(uid) + " " + std::to_string(uid) + " 1\n",
                           std::to_string(gid) + " " + std::to_string(gid) + " 1\n"};
}

int map_own_ids(const UserNamespacePlan& plan, const char*& stage) {
  static constexpr char kDeny[] = "deny";
  if (int err = write_proc_file("/proc/self/setgroups", kDeny, sizeof kDeny - 1, "user namespace: setgroups deny", stage);
      err != 0)
    return err;
  if (int err = write_proc_file("/proc/self/uid_map", plan.uid_map.data(), plan.uid_map.size(), "user namespace: uid_map",
                                stage);
      err != 0)
    return err;
  return write_proc_file("/proc/self/gid_map", plan.gid_map.data(), plan.gid_map.size(), "user namespace: gid_map", stage);
}

}  // namespace motor::sandbox
