#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"

namespace motor {

Status write_file_atomically(const std::string& path, std::string_view text, mode_t mode) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return make_error("io", "\"" + path + "\" names a directory, not a file");
  std::string tmp = dir + "/." + base + ".XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return sys_error("creating a temp file beside " + path);
  auto fail = [&](const std::string& what, int err) -> Status {
    ::close(fd);
    ::unlink(tmp.c_str());
    return sys_error(what, err);
  };
  if (fchmod(fd, mode) < 0) return fail("chmod " + tmp, errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("writing " + tmp, n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) < 0) return fail("fsync " + tmp, errno);
  if (::close(fd) < 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return sys_error("closing " + tmp, err);
  }
  if (rename(tmp.c_str(), path.c_str()) < 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return sys_error("renaming " + tmp + " to " + path, err);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return sys_error("opening " + dir);
  const int r = fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (r < 0) return sys_error("fsync " + dir, err);
  return {};
}

std::optional<std::string> read_small_file(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (ssize_t n; out.size() < max && (n = ::read(fd.get(), buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace motor
