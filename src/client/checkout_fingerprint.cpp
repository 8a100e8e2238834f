#include "client/checkout_fingerprint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "motor/unique_fd.hpp"

extern char** environ;

namespace motor::client {
namespace {

constexpr std::string_view kMagic = "motor-fingerprint 2\n";
constexpr size_t kMaxDirs = 20000;  // past this many directories the walk costs more than a sync

// A GIT_* variable that can change what `git add` sees (GIT_DIR, GIT_WORK_TREE, GIT_CONFIG_*,
// ...): every one but those that only concern transport, identity, editors and tracing.
bool git_environment() {
  static constexpr std::string_view kHarmless[] = {"GIT_SSL_", "GIT_SSH", "GIT_ASKPASS=", "GIT_TERMINAL_PROMPT=",
                                                   "GIT_EDITOR=", "GIT_PAGER=", "GIT_AUTHOR_", "GIT_COMMITTER_",
                                                   "GIT_HTTP_", "GIT_TRACE", "GIT_PROXY_"};
  for (char** e = environ; *e; ++e) {
    const std::string_view var = *e;
    if (!var.starts_with("GIT_")) continue;
    if (std::none_of(std::begin(kHarmless), std::end(kHarmless), [&](std::string_view h) { return var.starts_with(h); }))
      return true;
  }
  return false;
}

// The file's first `limit` bytes (all of it by default).
std::optional<std::string> read_all(const std::string& path, size_t limit = SIZE_MAX) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string out;
  struct stat st {};
  if (fstat(fd.get(), &st) == 0 && st.st_size > 0) out.reserve(std::min(limit, static_cast<size_t>(st.st_size)));
  char buf[65536];
  while (out.size() < limit) {
    const ssize_t n = ::read(fd.get(), buf, std::min(sizeof buf, limit - out.size()));
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

StatRecord dir_record(const struct stat& st) {
  return {st.st_mode, 0, st.st_ino, {st.st_mtim.tv_sec, st.st_mtim.tv_nsec}, {st.st_ctim.tv_sec, st.st_ctim.tv_nsec}};
}

// A file as git's index records it: git's mode, and size and inode cut to 32 bits.
StatRecord file_record(const struct stat& st) {
  uint32_t mode = S_ISLNK(st.st_mode) ? 0120000u : S_ISREG(st.st_mode) ? ((st.st_mode & 0100) ? 0100755u : 0100644u) : 0u;
  return {mode, static_cast<uint32_t>(st.st_size), static_cast<uint32_t>(st.st_ino),
          {static_cast<uint32_t>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec},
          {static_cast<uint32_t>(st.st_ctim.tv_sec), st.st_ctim.tv_nsec}};
}

// A config or exclude file: its stat data whole (not cut as git's index cuts a file's).
StatRecord config_record(const struct stat& st) {
  return {st.st_mode, static_cast<uint64_t>(st.st_size), st.st_ino, {st.st_mtim.tv_sec, st.st_mtim.tv_nsec},
          {st.st_ctim.tv_sec, st.st_ctim.tv_nsec}};
}

bool before(const StatRecord& r, const FsTime& ref) { return r.mtime < ref && r.ctime < ref; }

// Every directory below `fd` (relative path `rel`) but .git; false past kMaxDirs or on an error.
bool walk_dirs(int fd, const std::string& rel, std::vector<std::pair<std::string, StatRecord>>& out) {
  const int dup = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return false;
  DIR* d = fdopendir(dup);
  if (!d) {
    close(dup);
    return false;
  }
  bool ok = true;
  while (dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == ".." || name == ".git") continue;
    struct stat st {};
    if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      ok = false;
      break;
    }
    if (!S_ISDIR(st.st_mode)) continue;
    const std::string child = rel.empty() ? std::string(name) : rel + "/" + std::string(name);
    if (child.find('\n') != std::string::npos || out.size() >= kMaxDirs) {
      ok = false;
      break;
    }
    out.emplace_back(child, dir_record(st));
    UniqueFd sub(openat(fd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub || !walk_dirs(sub.get(), child, out)) {
      ok = false;
      break;
    }
  }
  closedir(d);
  return ok;
}

std::optional<FsTime> filesystem_clock(const std::string& dir) {
  const std::string path = fmt::format("{}/.motor-clock-{}", dir, getpid());
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return std::nullopt;
  struct stat st {};
  const bool ok = ::write(fd.get(), "t", 1) == 1 && fstat(fd.get(), &st) == 0;
  unlink(path.c_str());
  if (!ok) return std::nullopt;
  return FsTime{st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void put(std::string& out, char tag, const StatRecord& r, std::string_view path) {
  fmt::format_to(std::back_inserter(out), "{} {} {} {} {} {} {} {} {}\n", tag, r.mode, r.size, r.ino, r.mtime.sec,
                 r.mtime.nsec, r.ctime.sec, r.ctime.nsec, path);
}

// Parses "tag mode size ino ms mns cs cns path\n" at `at`; advances past it.
bool take(std::string_view text, size_t& at, char& tag, StatRecord& r, std::string_view& path) {
  const size_t nl = text.find('\n', at);
  if (nl == std::string_view::npos || nl < at + 2) return false;
  const char* p = text.data() + at + 2;
  const char* end = text.data() + nl;
  tag = text[at];
  int64_t v[7];
  for (int64_t& x : v) {
    auto [q, ec] = std::from_chars(p, end, x);
    if (ec != std::errc() || q >= end || *q != ' ') return false;
    p = q + 1;
  }
  r = {static_cast<uint32_t>(v[0]), static_cast<uint64_t>(v[1]), static_cast<uint64_t>(v[2]), {v[3], v[4]}, {v[5], v[6]}};
  path = std::string_view(p, static_cast<size_t>(end - p));
  at = nl + 1;
  return true;
}

// The watcher's line of a fingerprint: "watch INSTANCE GENERATION", or "watch -" for none.
std::string watch_line(const std::optional<WatchState>& watch) {
  return watch ? fmt::format("watch {} {}\n", watch->instance, watch->generation) : std::string("watch -\n");
}

// No synced file (`name_of` each of `files`) lies in a directory the watcher does not watch.
template <typename Files, typename NameOf>
bool watched_by(const WatchState& watch, const Files& files, NameOf name_of) {
  if (watch.unwatched.empty()) return true;
  const std::set<std::string_view> unwatched(watch.unwatched.begin(), watch.unwatched.end());
  for (const auto& f : files) {
    const std::string_view name = name_of(f);
    for (size_t slash = name.find('/'); slash != std::string_view::npos; slash = name.find('/', slash + 1)) {
      if (unwatched.contains(name.substr(0, slash + 1))) return false;
    }
  }
  return true;
}

bool write_replacing(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

uint64_t path_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string fingerprint_path(const std::string& cache_base, const std::string& root) {
  return fmt::format("{}/motor/fingerprints/{:016x}", cache_base, path_hash(root));
}

std::vector<std::string> git_config_files(const std::string& git_dir) {
  std::vector<std::string> files = {git_dir + "/config", git_dir + "/info/exclude", git_dir + "/info/attributes",
                                    "/etc/gitconfig"};
  const char* home = getenv("HOME");
  const char* xdg = getenv("XDG_CONFIG_HOME");
  const std::string config_home = xdg && *xdg ? xdg : std::string(home ? home : "/nonexistent") + "/.config";
  if (home) files.push_back(std::string(home) + "/.gitconfig");
  for (const char* f : {"/git/config", "/git/ignore", "/git/attributes"}) files.push_back(config_home + f);
  return files;
}

std::optional<ConfigRecords> config_records(const std::string& git_dir) {
  ConfigRecords out;
  for (const std::string& f : git_config_files(git_dir)) {
    struct stat st {};
    if (lstat(f.c_str(), &st) != 0) {
      if (errno != ENOENT) return std::nullopt;
      out.emplace_back(f, std::nullopt);
    } else {
      out.emplace_back(f, config_record(st));
    }
  }
  return out;
}

FingerprintStart begin_fingerprint(const std::string& root, const std::string& git_dir, const std::string& reference_dir) {
  FingerprintStart s;
  if (git_environment()) return s;
  auto clock = filesystem_clock(reference_dir);
  if (!clock) return s;
  s.reference = *clock;
  auto config = config_records(git_dir);
  if (!config) return s;
  for (const auto& [f, rec] : *config) {
    if (!rec) continue;
    // Settings that name more files, or a file system monitor, decide what git sees from
    // outside what is fingerprinted.
    auto text = read_all(f);
    if (!text) return s;
    std::string lower = *text;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (const char* word : {"excludesfile", "attributesfile", "fsmonitor", "include", "worktree", "untrackedcache"}) {
      if (lower.find(word) != std::string::npos) return s;
    }
  }
  s.config = std::move(*config);
  UniqueFd top(::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!top || fstat(top.get(), &st) != 0) return s;
  s.dirs.emplace_back("", dir_record(st));
  s.usable = walk_dirs(top.get(), "", s.dirs);
  return s;
}

std::optional<std::vector<std::pair<std::string, StatRecord>>> read_index_entries(const std::string& index_path) {
  auto data = read_all(index_path);
  if (!data || data->size() < 12 + 20 || data->compare(0, 4, "DIRC") != 0) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(data->data());
  const uint32_t version = be32(p + 4), count = be32(p + 8);
  if (version < 2 || version > 4) return std::nullopt;
  std::vector<std::pair<std::string, StatRecord>> out;
  out.reserve(count);
  size_t at = 12;
  const size_t limit = data->size() - 20;  // the trailing checksum
  std::string path;
  for (uint32_t i = 0; i < count; ++i) {
    if (at + 62 > limit) return std::nullopt;
    const unsigned char* e = p + at;
    StatRecord r{be32(e + 24), be32(e + 36), be32(e + 20), {be32(e + 8), be32(e + 12)}, {be32(e + 0), be32(e + 4)}};
    const uint16_t flags = static_cast<uint16_t>((e[60] << 8) | e[61]);
    size_t header = 62;
    if (flags & 0x4000) {
      if (version < 3 || at + 64 > limit) return std::nullopt;
      const uint16_t extended = static_cast<uint16_t>((e[62] << 8) | e[63]);
      if (extended & 0x6000) return std::nullopt;  // skip-worktree, intent-to-add
      header = 64;
    }
    // assume-unchanged, a stage of a merge, a gitlink (its content is another repository's HEAD)
    if ((flags & 0x8000) || (flags & 0x3000) || (r.mode & 0170000) == 0160000) return std::nullopt;
    size_t name_at = at + header;
    if (version == 4) {
      size_t strip = 0;
      unsigned char c = 0;
      if (name_at >= limit) return std::nullopt;
      c = p[name_at++];
      strip = c & 127;
      while (c & 128) {
        if (name_at >= limit) return std::nullopt;
        c = p[name_at++];
        strip = ((strip + 1) << 7) | (c & 127);
      }
      if (strip > path.size()) return std::nullopt;
      const void* nul = std::memchr(p + name_at, 0, limit - name_at);
      if (!nul) return std::nullopt;
      const size_t len = static_cast<const unsigned char*>(nul) - (p + name_at);
      path.resize(path.size() - strip);
      path.append(reinterpret_cast<const char*>(p + name_at), len);
      at = name_at + len + 1;
    } else {
      const void* nul = std::memchr(p + name_at, 0, limit - name_at);
      if (!nul) return std::nullopt;
      const size_t len = static_cast<const unsigned char*>(nul) - (p + name_at);
      path.assign(reinterpret_cast<const char*>(p + name_at), len);
      at += (header + len + 8) & ~size_t{7};
    }
    if (path.empty() || path.find('\n') != std::string::npos) return std::nullopt;
    out.emplace_back(path, r);
  }
  return out;
}

void save_fingerprint(const std::string& path, const std::string& root, const std::string& tree,
                      const std::string& private_index, const FingerprintStart& start) {
  // An old fingerprint stays true while it holds: if every stat still matches, the tree is the
  // one it names. So it is only ever replaced by a new one, never removed for want of one.
  if (!start.usable || root.find('\n') != std::string::npos) return;
  auto entries = read_index_entries(private_index);
  if (!entries) return;
  std::string out(kMagic);
  fmt::format_to(std::back_inserter(out), "{}\n{}\n", root, tree);
  const auto entry_name = [](const auto& entry) { return std::string_view(entry.first); };
  out += watch_line(start.watch && watched_by(*start.watch, *entries, entry_name) ? start.watch : std::nullopt);
  for (const auto& [file, rec] : start.config) {
    if (file.find('\n') != std::string::npos) return;
    put(out, rec ? 'C' : 'A', rec.value_or(StatRecord{}), file);
  }
  // Racy-git: whatever changed in the same clock tick as the start (or later) is not vouched for.
  for (const auto& [dir, rec] : start.dirs) {
    if (!before(rec, start.reference)) return;
    put(out, 'D', rec, dir);
  }
  for (const auto& [file, rec] : *entries) {
    if (!before(rec, start.reference)) return;
    put(out, 'F', rec, file);
  }
  const size_t slash = path.rfind('/');
  const std::string dir = path.substr(0, slash);
  mkdir(dir.substr(0, dir.rfind('/')).c_str(), 0700);
  mkdir(dir.c_str(), 0700);
  write_replacing(path, out);
}

namespace {

struct Expectation {
  char tag = 0;
  StatRecord want;
  std::string_view name;
};

// The 'F' records [begin, end) (files, grouped by directory): one directory fd per group.
bool files_unchanged(int top, const std::vector<Expectation>& files, size_t begin, size_t end) {
  std::string open_dir = "\x01";
  UniqueFd dir_fd;
  for (size_t i = begin; i < end; ++i) {
    const std::string_view name = files[i].name;
    const size_t slash = name.rfind('/');
    const std::string_view parent = slash == std::string_view::npos ? std::string_view() : name.substr(0, slash);
    if (parent != open_dir) {
      open_dir = std::string(parent);
      dir_fd = parent.empty() ? UniqueFd(::dup(top))
                              : UniqueFd(openat(top, open_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dir_fd) return false;
    }
    struct stat st {};
    const std::string base(slash == std::string_view::npos ? name : name.substr(slash + 1));
    if (fstatat(dir_fd.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !(file_record(st) == files[i].want)) return false;
  }
  return true;
}

// The files' stats on two threads where there are enough of them to pay for the second thread
// (the stats are the whole cost of an unchanged run's check on the client).
bool all_files_unchanged(int top, const std::vector<Expectation>& files) {
  constexpr size_t kSplitAt = 2000;
  if (files.size() < kSplitAt) return files_unchanged(top, files, 0, files.size());
  const size_t half = files.size() / 2;
  bool second = false;
  std::thread helper;
  try {
    helper = std::thread([&] { second = files_unchanged(top, files, half, files.size()); });
  } catch (const std::system_error&) {
    return files_unchanged(top, files, 0, files.size());
  }
  const bool first = files_unchanged(top, files, 0, half);
  helper.join();
  return first && second;
}

}  // namespace

std::optional<std::string> unchanged_tree(const std::string& path, const std::string& root,
                                          const std::optional<WatchState>& watch, Vouched* how) {
  if (how) *how = Vouched::kNot;
  if (git_environment()) return std::nullopt;
  // The header and git's config records lead the file: with the watcher's word, they are all
  // that is read.
  constexpr size_t kHead = 16384;
  auto data = read_all(path, watch ? kHead : SIZE_MAX);
  if (!data || !data->starts_with(kMagic)) return std::nullopt;
  std::string_view text = *data;
  size_t at = kMagic.size();
  const size_t root_end = text.find('\n', at);
  if (root_end == std::string_view::npos || text.substr(at, root_end - at) != root) return std::nullopt;
  at = root_end + 1;
  const size_t tree_end = text.find('\n', at);
  if (tree_end == std::string_view::npos) return std::nullopt;
  const std::string tree(text.substr(at, tree_end - at));
  const size_t watch_at = tree_end + 1;
  const size_t watch_end = text.find('\n', watch_at);
  if (watch_end == std::string_view::npos || !text.substr(watch_at).starts_with("watch ")) return std::nullopt;
  // The same watcher with no event since: only git's config files can have changed unseen.
  const bool by_watcher = watch && text.substr(watch_at, watch_end + 1 - watch_at) == watch_line(watch);
  if (!by_watcher && data->size() == kHead) {
    data = read_all(path);
    if (!data || !data->starts_with(kMagic)) return std::nullopt;
    text = *data;
  }
  at = watch_end + 1;
  UniqueFd top(::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top) return std::nullopt;
  std::vector<Expectation> files;
  while (at < text.size()) {
    Expectation x;
    if (!take(text, at, x.tag, x.want, x.name)) return std::nullopt;
    struct stat st {};
    if (x.tag == 'A' || x.tag == 'C') {
      const bool present = lstat(std::string(x.name).c_str(), &st) == 0;
      if (present != (x.tag == 'C') || (present && !(config_record(st) == x.want))) return std::nullopt;
    } else if (by_watcher) {
      break;  // the config records come first
    } else if (x.tag == 'D') {
      const int rc = x.name.empty() ? fstat(top.get(), &st)
                                    : fstatat(top.get(), std::string(x.name).c_str(), &st, AT_SYMLINK_NOFOLLOW);
      if (rc != 0 || !(dir_record(st) == x.want)) return std::nullopt;
    } else if (x.tag == 'F') {
      files.push_back(x);
    } else {
      return std::nullopt;
    }
  }
  if (by_watcher) {
    if (how) *how = Vouched::kByWatcher;
    return tree;
  }
  if (!all_files_unchanged(top.get(), files)) return std::nullopt;
  if (how) *how = Vouched::kByStats;
  // Every stat matched after the watcher answered: from now on its answer vouches for them.
  if (watch && watched_by(*watch, files, [](const Expectation& f) { return f.name; })) {
    write_replacing(path, std::string(text.substr(0, watch_at)) + watch_line(watch) + std::string(text.substr(watch_end + 1)));
  }
  return tree;
}

}  // namespace motor::client
