#include "sandbox/fd_hygiene.hpp"

#include <linux/close_range.h>
#include <unistd.h>

#include <cerrno>

namespace motor::sandbox {

int close_inherited_fds(const char*& stage) {
  // CLOEXEC rather than close: spawn_job's setup-status pipe must stay open until exec succeeds.
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    stage = "close_range(3.., CLOEXEC)";
    return errno;
  }
  return 0;
}

}  // namespace motor::sandbox
