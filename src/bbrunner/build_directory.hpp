// Paths bb_worker names relative to its build directory, opened by motor-bb-runner the way the
// runner resolves host_workspace: openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from the build
// directory, so neither ".." nor a symlink (one an earlier action left, say) leads out of it.
#pragma once

#include <string>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::bbrunner {

class BuildDirectory {
 public:
  static Expected<BuildDirectory> open(const std::string& path);
  const std::string& path() const { return path_; }

  // A new file for an action's stdout or stderr: its directory must exist beneath the build
  // directory; the file itself must not exist yet (O_EXCL, as bb_runner), and is 0666 & umask.
  Expected<UniqueFd> create_log(const std::string& relative) const;
  // CheckReadiness: does `relative` exist ("" = the build directory itself)?
  Status check_exists(const std::string& relative) const;

 private:
  BuildDirectory(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

}  // namespace motor::bbrunner
