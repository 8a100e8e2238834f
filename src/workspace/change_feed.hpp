// A workspace's change feed (issue 20: the no-change run): after a scan found the workspace as its
// baseline describes it, the next scan asks the feed instead of walking every inode's ctime
// (stat_walk.hpp). The feed is inotify over the workspace's tree (base/inotify_tree.hpp: every
// directory, every regular file's inode); it is started before the walk that found the tree
// unchanged, so the walk covers the time up to it and the feed every change after. Any event at
// all spends it: the next scan walks (and starts a fresh feed), as it did before feeds.
//
// Nothing but a job changes a workspace between two scans (a checkout drops the baseline, and the
// feed with it), and a job's processes have all ended before its scan: every change it made is
// queued by then, also the close of a file it wrote through a shared mapping.
//
// The runner's feeds share a budget of inotify watches and instances (root's, also systemd's):
// half of fs.inotify.max_user_watches, at most 32 feeds. Past it a workspace is walked as before.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/inotify_tree.hpp"

namespace motor::workspace {

class ChangeFeed {
 public:
  // Watches `root`, the directories in `skip` (relative, as the stat walk's) for their own entries
  // only. nullptr with why when the budget or the kernel refuses.
  static std::shared_ptr<ChangeFeed> start(const std::string& root, const std::set<std::string>& skip, std::string* why);
  ~ChangeFeed();
  ChangeFeed(const ChangeFeed&) = delete;
  ChangeFeed& operator=(const ChangeFeed&) = delete;

  // Whether anything may have changed since the feed started (once true, always true).
  bool changed();
  size_t watches() const { return reserved_; }

  // The runner's feeds now: watches and feeds (for tests and status).
  static size_t watches_in_use() { return in_use_.load(); }
  static int feeds_open() { return open_.load(); }

 private:
  ChangeFeed(const std::string& root, const std::set<std::string>& skip, size_t max_watches);
  std::mutex mu_;
  InotifyTree tree_;
  size_t reserved_ = 0;
  static std::atomic<size_t> in_use_;
  static std::atomic<int> open_;
};

}  // namespace motor::workspace
