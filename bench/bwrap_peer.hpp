// Issue 20's bwrap peer, shared by the benchmarks that compare with it: `bwrap --ro-bind /usr
// /usr` + the merged-/usr symlinks `--dev /dev --proc /proc --tmpfs /tmp --unshare-all
// --die-with-parent --new-session --cap-drop ALL`, flags in the order, then the command.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace motor::bench {

inline bool is_symlink(const char* path) {
  struct stat st {};
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

inline std::vector<std::string> bwrap_argv(const std::vector<std::string>& command) {
  std::vector<std::string> a{"/usr/bin/bwrap", "--ro-bind", "/usr", "/usr"};
  // The merged-/usr links, as symlinks (as Motor recreates them).
  for (const char* link : {"/bin", "/lib", "/lib64", "/sbin"}) {
    if (!is_symlink(link)) continue;
    char target[256];
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    a.insert(a.end(), {"--symlink", std::string(target, static_cast<size_t>(n)), link});
  }
  a.insert(a.end(), {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent",
                     "--new-session", "--cap-drop", "ALL"});
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

}  // namespace motor::bench
