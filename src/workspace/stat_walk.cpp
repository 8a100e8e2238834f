#include "workspace/stat_walk.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"

namespace motor::workspace {

Expected<FsStamp> filesystem_now(const std::string& marker) {
  UniqueFd fd(open(marker.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_error("opening " + marker);
  // Both times to "now" as this filesystem takes it (current_time of the inode: its clock, its
  // granularity); the ctime is set with them.
  if (futimens(fd.get(), nullptr) != 0) return sys_error("touching " + marker);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return sys_error("reading " + marker);
  return FsStamp{st.st_ctim.tv_sec, st.st_ctim.tv_nsec, st.st_dev};
}

namespace {

// One directory to read: its fd (opened by its parent's worker) and its path relative to root.
struct PendingDir {
  UniqueFd fd;
  std::string path;
};

// The walk's shared state: a queue of directories for the workers, and the first finding that
// ends it (a changed inode, a limit, an error).
class Walk {
 public:
  Walk(const std::set<std::string>& skip, const FsStamp& since, const WalkLimits& limits)
      : skip_(skip), since_(since), limits_(limits) {}

  void push(PendingDir dir) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(dir));
    cv_.notify_one();
  }
  // Every worker runs this until the queue is empty and no worker is reading a directory.
  void work() {
    for (;;) {
      PendingDir dir;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || busy_ == 0 || stopped_.load(); });
        if (stopped_.load() || queue_.empty()) {
          cv_.notify_all();
          return;
        }
        dir = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      }
      read_dir(std::move(dir));
      std::lock_guard lock(mu_);
      --busy_;
      cv_.notify_all();
    }
  }
  // An inode's ctime is checked; false (and the walk stops) if it may have changed since.
  bool check(const struct stat& st, const std::string& what) {
    if (entries_.fetch_add(1) + 1 > limits_.max_entries) return stop("more than the walk's entry limit");
    if (st.st_dev != since_.dev) return stop(what + " is on another filesystem");
    const FsStamp c{st.st_ctim.tv_sec, st.st_ctim.tv_nsec, st.st_dev};
    if (!(c < since_)) return stop(what + " changed");
    return true;
  }
  bool stop(std::string reason) {
    std::lock_guard lock(reason_mu_);
    if (!stopped_.exchange(true)) reason_ = std::move(reason);
    cv_.notify_all();
    return false;
  }
  WalkVerdict verdict() const {
    WalkVerdict v;
    v.unchanged = !stopped_.load();
    v.reason = reason_;
    v.entries = entries_.load();
    return v;
  }

 private:
  void read_dir(PendingDir dir) {
    DIR* d = fdopendir(dir.fd.get());
    if (!d) {
      stop("reading a directory: " + std::string(std::strerror(errno)));
      return;
    }
    dir.fd.release();  // the DIR owns it now
    const int dfd = dirfd(d);
    errno = 0;
    while (dirent* e = readdir(d)) {
      if (stopped_.load()) break;
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        stop("stat of an entry: " + std::string(std::strerror(errno)));
        break;
      }
      if (!check(st, "an entry")) break;
      if (!S_ISDIR(st.st_mode)) continue;
      std::string rel = dir.path.empty() ? std::string(name) : dir.path + "/" + std::string(name);
      if (skip_.count(rel)) continue;
      UniqueFd sub(openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat opened {};
      if (!sub || fstat(sub.get(), &opened) != 0 || opened.st_ino != st.st_ino || opened.st_dev != st.st_dev) {
        stop("a directory moved while it was walked");
        break;
      }
      push(PendingDir{std::move(sub), std::move(rel)});
      errno = 0;
    }
    if (errno != 0 && !stopped_.load()) stop("reading a directory: " + std::string(std::strerror(errno)));
    closedir(d);
  }

  const std::set<std::string>& skip_;
  const FsStamp since_;
  const WalkLimits limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PendingDir> queue_;
  int busy_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<size_t> entries_{0};
  std::mutex reason_mu_;
  std::string reason_;
};

}  // namespace

WalkVerdict unchanged_since(const std::string& root, const std::set<std::string>& skip, const FsStamp& since,
                            const WalkLimits& limits) {
  Walk walk(skip, since, limits);
  UniqueFd fd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || fstat(fd.get(), &st) != 0) {
    walk.stop("opening the workspace: " + std::string(std::strerror(errno)));
    return walk.verdict();
  }
  if (!walk.check(st, "the workspace directory")) return walk.verdict();
  walk.push(PendingDir{std::move(fd), ""});
  // A second worker where the machine has the cores; the walk is whole with one.
  std::vector<std::thread> helpers;
  for (int i = 1; i < limits.threads; ++i) {
    try {
      helpers.emplace_back([&walk] { walk.work(); });
    } catch (const std::system_error&) {
      break;
    }
  }
  walk.work();
  for (auto& t : helpers) t.join();
  return walk.verdict();
}

}  // namespace motor::workspace
