#include "bbrunner/build_directory.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace motor::bbrunner {
namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

Error path_error(const std::string& relative, int err) {
  const char* why = err == ELOOP   ? "a component is a symlink"
                    : err == EXDEV ? "it leaves the build directory"
                                   : std::strerror(err);
  return make_error("invalid_argument", "\"" + relative + "\" in the build directory: " + why);
}

int open_beneath(int dir, const char* path, uint64_t flags, uint64_t mode) {
  open_how how{};
  how.flags = flags;
  how.mode = mode;
  how.resolve = kResolve;
  return static_cast<int>(syscall(SYS_openat2, dir, path, &how, sizeof how));
}

}  // namespace

Expected<BuildDirectory> BuildDirectory::open(const std::string& path) {
  if (path.empty() || path.front() != '/') return make_error("config", "the build directory must be an absolute path");
  UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return make_error("config", "build directory " + path + ": " + std::strerror(errno));
  return BuildDirectory(path, std::move(fd));
}

Expected<UniqueFd> BuildDirectory::create_log(const std::string& relative) const {
  const auto slash = relative.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : relative.substr(0, slash);
  const std::string name = slash == std::string::npos ? relative : relative.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return make_error("invalid_argument", "\"" + relative + "\" names no file");
  UniqueFd parent(open_beneath(fd_.get(), dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, 0));
  if (!parent) return path_error(relative, errno);
  UniqueFd file(::openat(parent.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_APPEND, 0666));
  if (!file) return path_error(relative, errno);
  return file;
}

Status BuildDirectory::check_exists(const std::string& relative) const {
  UniqueFd fd(open_beneath(fd_.get(), relative.empty() ? "." : relative.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC, 0));
  if (!fd) return path_error(relative, errno);
  return {};
}

}  // namespace motor::bbrunner
