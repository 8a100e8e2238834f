#include "workspace/workspace_names.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "motor/unique_fd.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::workspace {
namespace {

constexpr const char* kSecretName = ".name-key";
constexpr const char* kKeysDir = ".keys";
constexpr size_t kIdHexDigits = 32;

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// A caller name as a path component (the runner's callers are account names).
bool plain_component(std::string_view s) {
  return !s.empty() && s.size() <= 128 && s[0] != '.' && s.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

bool is_id_name(std::string_view s) {
  return s.size() == kIdHexDigits &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status ensure_root_dir(const std::string& path, mode_t mode) { return ensure_owned_dir(path, mode, 0, 0); }

Expected<SipKey> read_secret(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("reading " + path);
  SipKey key{};
  if (::read(fd.get(), key.data(), key.size()) != static_cast<ssize_t>(key.size()))
    return make_error("workspace_setup_failed", path + " is not 16 bytes long");
  return key;
}

// The root's secret: read, or made once (written beside, fsynced, linked into place so two
// processes never end up with different secrets).
Expected<SipKey> root_secret(const std::string& root) {
  // A root's secret never changes while its file exists (same inode).
  static std::map<std::string, std::pair<ino_t, SipKey>> cache;
  const std::string path = root + "/" + kSecretName;
  struct stat st {};
  const bool exists = lstat(path.c_str(), &st) == 0;
  if (auto it = cache.find(root); exists && it != cache.end() && it->second.first == st.st_ino) return it->second.second;
  if (!exists && errno == ENOENT) {
    if (auto made = ensure_root_dir(root, 0711); !made) return made.error();
    SipKey fresh{};
    if (getrandom(fresh.data(), fresh.size(), 0) != static_cast<ssize_t>(fresh.size())) return sys_error("getrandom");
    const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    const bool written = fd && ::write(fd.get(), fresh.data(), fresh.size()) == static_cast<ssize_t>(fresh.size()) &&
                         fsync(fd.get()) == 0;
    const int link_errno = written && link(tmp.c_str(), path.c_str()) != 0 ? errno : 0;
    unlink(tmp.c_str());
    if (!written || (link_errno != 0 && link_errno != EEXIST)) return sys_error("writing " + path, written ? link_errno : errno);
  }
  auto key = read_secret(path);
  if (!key) return key.error();
  if (lstat(path.c_str(), &st) == 0) cache[root] = {st.st_ino, *key};
  return *key;
}

std::string keys_dir(const std::string& root, const std::string& caller) { return root + "/" + kKeysDir + "/" + caller; }

}  // namespace

Status ensure_owned_dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  // Looked at first, made only if missing: a mkdir of one that exists still takes its parent's
  // lock, which every job start paid while other jobs' sandboxes were being built.
  struct stat st {};
  if (lstat(path.c_str(), &st) < 0) {
    if (errno != ENOENT) return sys_error("checking " + path);
    if (mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sys_error("creating " + path);
    if (lstat(path.c_str(), &st) < 0) return sys_error("checking " + path);
  }
  // A symlink here would let a path escape; only a real directory will do.
  if (!S_ISDIR(st.st_mode)) return make_error("workspace_setup_failed", path + " exists and is not a directory");
  if (st.st_uid != uid || st.st_gid != gid) {
    if (chown(path.c_str(), uid, gid) < 0) return sys_error("chown " + path);
  }
  if ((st.st_mode & 07777) != mode && chmod(path.c_str(), mode) < 0) return sys_error("chmod " + path);
  return {};
}

uint64_t siphash24(const SipKey& key, std::string_view data) {
  const uint64_t k0 = load_le64(key.data()), k1 = load_le64(key.data() + 8);
  uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
  uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
  auto round = [&] {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  };
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  const size_t full = data.size() & ~size_t{7};
  for (size_t i = 0; i < full; i += 8) {
    const uint64_t m = load_le64(p + i);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t last = uint64_t{data.size() & 0xff} << 56;
  for (size_t j = 0; j < data.size() - full; ++j) last |= uint64_t{p[full + j]} << (8 * j);
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

Expected<std::string> workspace_dir_name(const std::string& root, std::string_view caller, std::string_view key) {
  if (!plain_component(caller)) return make_error("workspace_setup_failed", "the caller's name cannot be a directory name");
  if (auto st = validate_workspace_key(key); !st) return st.error();
  // Test build only: the layout that shows the caller and key to every job of the workspace.
  if (control_weakened("workspace-names")) return fmt::format("{}/{}", caller, workspace_key_file_name(key));
  auto secret = root_secret(root);
  if (!secret) return secret.error();
  // Two domain-separated 64-bit outputs; the NUL keeps ("ab","c") and ("a","bc") apart.
  std::string message = fmt::format("1{}", caller);
  message.push_back('\0');
  message.append(key);
  const uint64_t a = siphash24(*secret, message);
  message[0] = '2';
  const uint64_t b = siphash24(*secret, message);
  return fmt::format("{:016x}{:016x}", a, b);
}

Expected<std::string> workspace_dir_path(const std::string& root, std::string_view caller, std::string_view key) {
  auto name = workspace_dir_name(root, caller, key);
  if (!name) return name.error();
  return root + "/" + *name;
}

Status note_workspace_key(const std::string& root, const std::string& caller, const std::string& key) {
  if (auto st = validate_workspace_key(key); !st) return st;
  const std::string dir = keys_dir(root, caller);
  const std::string path = dir + "/" + workspace_key_file_name(key);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && st.st_size > 0) return {};
  if (auto s = ensure_root_dir(root + "/" + kKeysDir, 0700); !s) return s;
  if (auto s = ensure_root_dir(dir, 0700); !s) return s;
  // A path key's name is a hash: the file holds the key, for workspace.list. A short key's file
  // holds it too (so an empty file is one a crash cut short, and is written again).
  return write_file_atomically(path, key, 0600);
}

void forget_workspace_key(const std::string& root, const std::string& caller, const std::string& key) {
  unlink((keys_dir(root, caller) + "/" + workspace_key_file_name(key)).c_str());
  rmdir(keys_dir(root, caller).c_str());  // only once it is empty
}

std::optional<std::string> key_of_file(const std::string& path, std::string_view name) {
  if (!is_path_key_file_name(name)) return key_named(name, "");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string key(4097, '\0');
  const ssize_t n = ::read(fd.get(), key.data(), key.size());
  key.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return key_named(name, key);  // a file whose key does not hash to its name names nothing
}

std::vector<std::string> noted_workspace_keys(const std::string& root, const std::string& caller) {
  std::vector<std::string> keys;
  if (!plain_component(caller)) return keys;
  const std::string dir = keys_dir(root, caller);
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (auto key = key_of_file(dir + "/" + e->d_name, e->d_name)) keys.push_back(std::move(*key));
    }
    closedir(d);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

Expected<int> migrate_legacy_workspace_dirs(const std::string& root, std::vector<std::string>& problems) {
  if (control_weakened("workspace-names")) return 0;  // the test build's layout is the old one
  if (auto st = ensure_root_dir(root, 0711); !st) return st.error();
  if (auto secret = root_secret(root); !secret) return secret.error();
  std::vector<std::pair<std::string, std::string>> legacy;  // (caller, key)
  if (DIR* d = opendir(root.c_str())) {
    while (dirent* c = readdir(d)) {
      const std::string caller = c->d_name;
      struct stat st {};
      // An id directory is the job account's; a caller directory of the old layout is root's.
      // (made root:root 0711), holding the job account's key directories.
      if (!plain_component(caller) || is_id_name(caller) || fstatat(dirfd(d), c->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 07777) != 0711)
        continue;
      if (DIR* keys = opendir((root + "/" + caller).c_str())) {
        while (dirent* k = readdir(keys)) {
          struct stat kst {};
          if (validate_workspace_key(k->d_name) && fstatat(dirfd(keys), k->d_name, &kst, AT_SYMLINK_NOFOLLOW) == 0 &&
              S_ISDIR(kst.st_mode))
            legacy.emplace_back(caller, k->d_name);
        }
        closedir(keys);
      }
    }
    closedir(d);
  }
  int moved = 0;
  for (const auto& [caller, key] : legacy) {
    const std::string from = root + "/" + caller + "/" + key;
    auto to = workspace_dir_path(root, caller, key);
    if (!to) return to.error();
    struct stat st {};
    if (lstat(to->c_str(), &st) == 0) {
      problems.push_back(fmt::format("{} was not moved: {} exists", from, *to));
      continue;
    }
    // The key is noted first: a crash between the two leaves a noted key whose directory is
    // still at the old place, which the next start moves.
    if (auto s = note_workspace_key(root, caller, key); !s) return s.error();
    if (rename(from.c_str(), to->c_str()) != 0) return sys_error("moving " + from + " to " + *to);
    ++moved;
  }
  for (const auto& [caller, key] : legacy) rmdir((root + "/" + caller).c_str());  // emptied caller directories
  return moved;
}

}  // namespace motor::workspace
