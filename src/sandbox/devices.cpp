#include "sandbox/devices.hpp"

#include <sys/mount.h>

#include <string>

#include "motor/test_switches.hpp"

namespace motor::sandbox {

void plan_devices(std::vector<MountOp>& ops, uint64_t shm_size_bytes, DeviceNodes nodes) {
  // Not nodev (the nodes must work); nosuid, noexec, and read-only once populated.
  ops.push_back(filesystem_op("tmpfs", "/dev", {{"mode", "0755"}, {"size", "64k"}, {"nr_inodes", "64"}},
                              MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, /*read_only_after=*/true));
  struct Node {
    const char* name;
    unsigned major, minor;
  };
  static constexpr Node kNodes[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                                    {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
  for (const Node& node : kNodes) {
    const std::string path = std::string("/dev/") + node.name;
    if (nodes == DeviceNodes::kMade) {
      ops.push_back(char_device_op(path, node.major, node.minor, 0666));
    } else {  // the host's node, checked in the child to be the one named here (bind_device_op)
      ops.push_back(bind_device_op(path, node.major, node.minor));
    }
  }

  ops.push_back(filesystem_op("tmpfs", "/dev/shm", {{"mode", "1777"}, {"size", std::to_string(shm_size_bytes)}},
                              MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false));
  // Every devpts mount is a new instance since Linux 4.7; ptmx inside it is the only way in. All
  // instances but the host's share kernel.pty.max - kernel.pty.reserve ptys (3,072 here): without
  // a max= of its own, one job could take them all and no other job could open a terminal.
  std::vector<std::pair<std::string, std::string>> pts_options = {{"newinstance", ""}, {"ptmxmode", "0666"}, {"mode", "0620"}};
  if (!control_weakened("pts-max")) pts_options.emplace_back("max", std::to_string(kJobPtyMax));  // test build only
  ops.push_back(filesystem_op("devpts", "/dev/pts", std::move(pts_options), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false));
  ops.push_back(symlink_op("/dev/ptmx", "pts/ptmx"));
  ops.push_back(symlink_op("/dev/fd", "/proc/self/fd"));
  ops.push_back(symlink_op("/dev/stdin", "/proc/self/fd/0"));
  ops.push_back(symlink_op("/dev/stdout", "/proc/self/fd/1"));
  ops.push_back(symlink_op("/dev/stderr", "/proc/self/fd/2"));
}

}  // namespace motor::sandbox
