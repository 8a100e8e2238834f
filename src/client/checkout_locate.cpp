#include "client/checkout_locate.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "client/checkout_fingerprint.hpp"
#include "client/git_process.hpp"
#include "motor/unique_fd.hpp"

namespace motor::client {
namespace {

// The checkout `dir` is in, without starting git: only for a checkout whose last sync left a
// fingerprint (which holds git's own answers for it) and a plain `.git` directory; nullopt
// sends the caller to `git rev-parse`.
std::optional<Checkout> checkout_from_fingerprint(const std::string& dir) {
  char real[PATH_MAX];
  if (!realpath(dir.c_str(), real)) return std::nullopt;
  std::string root = real;
  for (;;) {
    struct stat st {};
    if (root.find("/.git/") != std::string::npos || root.ends_with("/.git")) return std::nullopt;  // git says: not a work tree
    if (lstat((root == "/" ? std::string("/.git") : root + "/.git").c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) return std::nullopt;  // a worktree link, or someone else's
      break;
    }
    if (root == "/") return std::nullopt;
    root.resize(std::max<size_t>(root.rfind('/'), 1));
  }
  UniqueFd fd(open(fingerprint_path(cache_base(), root).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  Checkout c;
  c.root = root;
  const std::string here = real;
  c.rel_cwd = here.size() > root.size() ? here.substr(root.size() + (root == "/" ? 0 : 1)) : "";
  c.objects_dir = root + "/.git/objects";
  c.index_path = root + "/.git/index";
  return c;
}

}  // namespace

std::string cache_base() {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  return xdg && *xdg ? xdg : std::string(home ? home : "/tmp") + "/.cache";
}

Expected<Checkout> find_checkout(const std::string& dir) {
  if (auto known = checkout_from_fingerprint(dir)) return *known;
  // One git call for all four: each process costs ~10-20 ms on a loaded host.
  auto r = git({"-C", dir, "rev-parse", "--show-toplevel", "--show-prefix", "--path-format=absolute", "--git-path",
                "objects", "--git-path", "index"});
  if (!r) return r.error();
  if (r->status != 0) return Error{"not_a_checkout", dir + " is not inside a Git checkout"};
  std::vector<std::string> lines;
  for (size_t at = 0; at < r->out.size();) {
    const auto nl = r->out.find('\n', at);
    if (nl == std::string::npos) break;
    lines.push_back(r->out.substr(at, nl - at));
    at = nl + 1;
  }
  if (lines.size() != 4) return Error{"not_a_checkout", "git rev-parse: unexpected output"};
  Checkout c;
  c.root = lines[0];
  c.rel_cwd = lines[1];
  while (!c.rel_cwd.empty() && c.rel_cwd.back() == '/') c.rel_cwd.pop_back();
  c.objects_dir = lines[2];
  c.index_path = lines[3];
  return c;
}

std::string derive_workspace_key(const std::string& root) {
  std::string base = root.substr(root.rfind('/') + 1);
  std::string safe;
  for (char c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    safe.push_back(ok ? c : '_');
  }
  while (!safe.empty() && safe[0] == '.') safe.erase(0, 1);
  if (safe.size() > 100) safe.resize(100);
  if (safe.empty()) safe = "checkout";
  return fmt::format("{}-{:08x}", safe, static_cast<uint32_t>(path_hash(root)));
}

}  // namespace motor::client
