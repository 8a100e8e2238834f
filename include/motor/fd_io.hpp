// Blocking reads and writes of whole buffers on a file descriptor, retrying on EINTR and short
// transfers. For processes that may block (clients, helpers), never for the runner's loop.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace motor {

// False on EOF or an error before all `n` bytes were read.
inline bool read_exact(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// False on an error before all `n` bytes were written.
inline bool write_all(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace motor
