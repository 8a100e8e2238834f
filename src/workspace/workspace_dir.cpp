#include "workspace/workspace_dir.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "base/sha256.hpp"
#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::workspace {
namespace {

bool safe_component(std::string_view s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    c == '.' || c == '@';
    if (!ok) return false;
  }
  return true;
}

constexpr size_t kMaxPathKeyBytes = 4096;
constexpr char kPathKeyMark = '~';

// A canonical absolute path: "/" or "/a/b" with no empty, "." or ".." component and no control
// byte (a newline would end a line of the runner's records).
bool canonical_path(std::string_view s) {
  if (s.empty() || s[0] != '/' || s.size() > kMaxPathKeyBytes) return false;
  if (s == "/") return true;
  if (s.back() == '/') return false;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  for (size_t at = 1; at <= s.size();) {
    size_t end = s.find('/', at);
    if (end == std::string_view::npos) end = s.size();
    const std::string_view part = s.substr(at, end - at);
    if (part.empty() || part == "." || part == "..") return false;
    at = end + 1;
  }
  return true;
}

bool short_key(std::string_view key) { return safe_component(key) && key.find('@') == std::string_view::npos; }

}  // namespace

Status validate_workspace_key(std::string_view key) {
  if (!short_key(key) && !canonical_path(key)) {
    return make_error("workspace_key_rejected",
                      "a workspace key is 1 to 128 letters, digits, '-', '_' or '.', not starting with '.', or the "
                      "canonical absolute path of the checkout (at most 4096 bytes, no \".\" or \"..\" or empty "
                      "component, no control character)");
  }
  return {};
}

bool is_path_key(std::string_view key) { return canonical_path(key); }

std::string workspace_key_file_name(std::string_view key) {
  if (!is_path_key(key)) return std::string(key);
  const std::string hex = to_hex(sha256(key));
  return kPathKeyMark + hex.substr(0, 40);
}

bool is_path_key_file_name(std::string_view name) {
  return name.size() == 41 && name[0] == kPathKeyMark &&
         std::all_of(name.begin() + 1, name.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_workspace_key_file_name(std::string_view name) { return is_path_key_file_name(name) || short_key(name); }

std::optional<std::string> key_named(std::string_view name, std::string_view key_in_file) {
  if (short_key(name)) return std::string(name);
  if (!is_path_key_file_name(name) || !is_path_key(key_in_file) || workspace_key_file_name(key_in_file) != name) {
    return std::nullopt;
  }
  return std::string(key_in_file);
}

Status check_dir_beneath(const std::string& workspace, const std::string& rel) {
  const Error missing = make_error("workspace_setup_failed",
                                   "the working directory \"" + rel +
                                       "\" does not exist in the workspace (as a directory reached without symlinks)");
  UniqueFd top(::open(workspace.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top) return missing;
  if (rel.empty()) return {};
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd dir(static_cast<int>(syscall(SYS_openat2, top.get(), rel.c_str(), &how, sizeof how)));
  if (!dir) return missing;
  return {};
}

Expected<std::string> relative_cwd(std::string_view checkout, std::string_view cwd, std::string_view checkout_field) {
  std::string_view rel = cwd;
  if (!cwd.empty() && cwd[0] == '/') {
    std::string_view root = checkout;
    while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
    if (root.empty() || root[0] != '/' || cwd.substr(0, root.size()) != root ||
        (cwd.size() > root.size() && cwd[root.size()] != '/' && root != "/")) {
      return make_error("bad_request", fmt::format("cwd \"{}\" is not inside {} \"{}\"", cwd, checkout_field, checkout));
    }
    rel = cwd.substr(root.size());
  }
  std::string out;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view part = rel.substr(start, end - start);
    if (part == "..") return make_error("bad_request", "cwd may not contain \"..\"");
    if (!part.empty() && part != ".") {
      if (!out.empty()) out.push_back('/');
      out.append(part);
    }
    start = end + 1;
  }
  return out;
}

Expected<std::string> ensure_workspace_dir(const std::string& root, const std::string& caller, const std::string& key,
                                           uid_t owner_uid, gid_t owner_gid) {
  if (!safe_component(caller)) return make_error("workspace_setup_failed", "the caller's name cannot be a directory name");
  if (auto s = validate_workspace_key(key); !s) return s.error();
  if (auto s = ensure_owned_dir(root, 0711, 0, 0); !s) return s.error();
  auto name = workspace_dir_name(root, caller, key);
  if (!name) return name.error();
  // Test build only ("workspace-names"): <caller>/<key>, below a root-owned caller directory.
  if (const auto slash = name->find('/'); slash != std::string::npos) {
    if (auto s = ensure_owned_dir(root + "/" + name->substr(0, slash), 0711, 0, 0); !s) return s.error();
  }
  const std::string dir = root + "/" + *name;
  if (auto s = ensure_owned_dir(dir, 0700, owner_uid, owner_gid); !s) return s.error();
  if (auto s = note_workspace_key(root, caller, key); !s) return s.error();
  return dir;
}

}  // namespace motor::workspace
