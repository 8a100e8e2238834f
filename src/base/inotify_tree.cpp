#include "base/inotify_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <vector>

namespace motor {
namespace {

constexpr uint32_t kDirEvents = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_DELETE_SELF |
                                IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_DONT_FOLLOW | IN_ONLYDIR;
// A skipped directory: what the ctime of the directory itself would show (entries in and out, its
// own attributes), nothing of what lies below.
constexpr uint32_t kSkippedDirEvents =
    IN_ATTRIB | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_DONT_FOLLOW | IN_ONLYDIR;
constexpr uint32_t kFileEvents = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW;

std::string join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

}  // namespace

InotifyTree::InotifyTree(std::string root, std::set<std::string> skip, size_t max_watches, bool skip_git_dirs)
    : root_(std::move(root)), skip_(std::move(skip)), max_watches_(max_watches), skip_git_dirs_(skip_git_dirs) {}

size_t InotifyTree::user_watch_limit(size_t fallback) {
  UniqueFd fd(::open("/proc/sys/fs/inotify/max_user_watches", O_RDONLY | O_CLOEXEC));
  char buf[32];
  const ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
  size_t limit = fallback;
  if (n > 0) std::from_chars(buf, buf + n, limit);
  return limit;
}

bool InotifyTree::fail(std::string why) {
  if (reason_.empty()) reason_ = std::move(why);
  broken_ = true;
  return false;
}

bool InotifyTree::start() {
  fd_ = UniqueFd(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd_) return fail(std::string("inotify_init1: ") + std::strerror(errno));
  return watch_tree("");
}

bool InotifyTree::add(const std::string& rel, uint32_t mask, int* wd_out) {
  const std::string path = rel.empty() ? root_ : root_ + "/" + rel;
  const int wd = inotify_add_watch(fd_.get(), path.c_str(), mask);
  *wd_out = wd;
  if (wd < 0) return false;
  watches_.insert(wd);
  if (watches_.size() > max_watches_) {
    errno = ENOSPC;
    return fail("more than " + std::to_string(max_watches_) + " files and directories");
  }
  return true;
}

bool InotifyTree::watch_file(const std::string& rel) {
  int wd = -1;
  if (add(rel, kFileEvents, &wd)) return true;
  // Gone again before its mark (a temporary file): its removal was its directory's event.
  if (wd < 0 && (errno == ENOENT || errno == ENOTDIR)) return true;
  return wd < 0 ? fail(join(root_, rel) + ": inotify_add_watch: " + std::strerror(errno)) : false;
}

bool InotifyTree::watch_tree(const std::string& top) {
  std::vector<std::string> pending{top};
  while (!pending.empty()) {
    const std::string rel = std::move(pending.back());
    pending.pop_back();
    const bool skipped = skip_.contains(rel);
    int wd = -1;
    if (!add(rel, skipped ? kSkippedDirEvents : kDirEvents, &wd)) {
      return wd < 0 ? fail(join(root_, rel) + ": inotify_add_watch: " + std::strerror(errno)) : false;
    }
    dirs_[wd] = rel;
    if (skipped) continue;
    const std::string path = rel.empty() ? root_ : root_ + "/" + rel;
    DIR* d = opendir(path.c_str());
    if (!d) return fail(path + ": " + std::strerror(errno));
    bool ok = true;
    while (dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == ".." || (skip_git_dirs_ && name == ".git")) continue;
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone: its directory's event
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      if (type == DT_DIR) {
        pending.push_back(join(rel, name));
      } else if (type == DT_REG && !watch_file(join(rel, name))) {
        ok = false;
        break;
      }
    }
    closedir(d);
    if (!ok) return false;
  }
  return true;
}

void InotifyTree::drain() {
  if (!fd_) return;
  alignas(inotify_event) char buf[65536];
  bool any = false;
  for (;;) {
    const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      fail(std::string("reading inotify events: ") + (n < 0 ? std::strerror(errno) : "end of file"));
      break;
    }
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      any = true;
      handle(*e);
    }
  }
  if (any) ++generation_;
}

void InotifyTree::handle(const inotify_event& e) {
  if (e.mask & IN_Q_OVERFLOW) {
    fail("the kernel's event queue overflowed");
    return;
  }
  auto dir = dirs_.find(e.wd);
  if (e.mask & IN_IGNORED) {
    watches_.erase(e.wd);
    if (dir != dirs_.end()) {
      if (dir->second.empty()) fail("the root went away");
      dirs_.erase(dir);
    }
    return;
  }
  if (dir == dirs_.end()) return;  // a file's own mark: the event is the change
  if (e.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
    if (dir->second.empty()) fail("the root went away");
    return;
  }
  if (e.len == 0 || skip_.contains(dir->second)) return;
  const std::string_view name(e.name);
  if (name == ".gitignore") gitignore_touched_ = true;
  const std::string rel = join(dir->second, name);
  if (e.mask & IN_ISDIR) {
    if (e.mask & (IN_MOVED_FROM | IN_MOVED_TO)) fail("a directory moved: " + rel);
    if ((e.mask & IN_CREATE) && !(skip_git_dirs_ && name == ".git")) watch_tree(rel);
  } else if (e.mask & (IN_CREATE | IN_MOVED_TO)) {
    struct stat st {};
    const std::string path = join(root_, rel);
    if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) watch_file(rel);
  }
}

}  // namespace motor
