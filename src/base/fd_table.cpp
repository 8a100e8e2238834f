#include "base/fd_table.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace motor {

std::size_t reserve_fd_table(std::size_t count) {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0) return 0;
  const std::size_t n = std::min<std::size_t>(count, nofile.rlim_cur);
  if (n == 0) return 0;
  const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (probe < 0) return 0;
  // The lowest free descriptor at or above n - 1: the table grows to hold it (a power of two).
  const int high = ::fcntl(probe, F_DUPFD_CLOEXEC, static_cast<int>(n - 1));
  ::close(probe);
  if (high < 0) return 0;
  ::close(high);
  return static_cast<std::size_t>(high) + 1;
}

}  // namespace motor
