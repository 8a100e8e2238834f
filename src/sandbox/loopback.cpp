#include "sandbox/loopback.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace motor::sandbox {

int bring_up_loopback(const char*& stage) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    stage = "loopback: socket";
    return errno;
  }
  ifreq req{};
  std::memcpy(req.ifr_name, "lo", 3);
  int err = 0;
  if (ioctl(fd, SIOCGIFFLAGS, &req) != 0) {
    stage = "loopback: SIOCGIFFLAGS lo";
    err = errno;
  } else {
    req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP | IFF_RUNNING);
    if (ioctl(fd, SIOCSIFFLAGS, &req) != 0) {
      stage = "loopback: SIOCSIFFLAGS lo up";
      err = errno;
    }
  }
  close(fd);
  return err;
}

}  // namespace motor::sandbox
