// A directory tree watched with inotify: the client's checkout watcher (client/checkout_watch.hpp)
// and the runner's change feed of a workspace (workspace/change_feed.hpp) both ask "did anything
// in this tree change since I started watching it?" and get the answer without a stat walk.
//
// Every directory gets a watch for its entries and their data and metadata; every regular file
// also gets a mark of its own, because a directory's watch only hears of a change made through a
// name in it: a write through a hard link from elsewhere, or a new link's link count, reaches the
// file's own mark only. Symlinks and special files need none (a symlink cannot be rewritten in
// place; a FIFO holds no data). A directory is watched before it is listed, so an entry made
// meanwhile is listed or heard of. New directories and files are watched as their events arrive.
// The kernel queues an event inside the system call that makes the change, before that call
// returns; so after the last writer ended, one drain() sees every change it made.
//
// Writes through a shared mapping make no event of their own; the close of a descriptor opened for
// writing does (IN_CLOSE_WRITE), which every mapping's writer made, and which is queued at the
// latest when that process exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "motor/unique_fd.hpp"

struct inotify_event;

namespace motor {

class InotifyTree {
 public:
  // `skip`: directories (relative to root, no trailing '/') watched for their own entries only,
  // never entered (a build's target/). `max_watches`: past this many, start() fails.
  // `skip_git_dirs`: directories named .git are not watched at all (git's own writes in a
  // checkout's repository are none of the watcher's business).
  InotifyTree(std::string root, std::set<std::string> skip, size_t max_watches, bool skip_git_dirs);

  // False when the tree cannot be watched whole (too many watches, an unreadable directory, the
  // kernel's limits); why in reason().
  bool start();
  // Reads every queued event; each batch with any event moves generation(). Returns at once when
  // none is queued (the descriptor is non-blocking).
  void drain();

  int fd() const { return fd_.get(); }
  uint64_t generation() const { return generation_; }
  // It can no longer tell: events were lost, the root went away, a directory was moved (our names
  // for its subtree are stale), a new directory could not be watched, or the limit was reached.
  bool broken() const { return broken_; }
  // A .gitignore was created, changed or removed somewhere watched (the client's watcher ends on it).
  bool gitignore_touched() const { return gitignore_touched_; }
  size_t watches() const { return watches_.size(); }
  const std::string& reason() const { return reason_; }

  // The user's inotify watch limit (fs.inotify.max_user_watches), or `fallback` if unreadable.
  static size_t user_watch_limit(size_t fallback);

 private:
  bool add(const std::string& rel, uint32_t mask, int* wd);
  bool watch_file(const std::string& rel);
  bool watch_tree(const std::string& top);
  void handle(const ::inotify_event& e);
  bool fail(std::string why);

  std::string root_;
  std::set<std::string> skip_;
  size_t max_watches_;
  bool skip_git_dirs_;
  UniqueFd fd_;
  std::unordered_map<int, std::string> dirs_;  // a directory's watch: its path below the root
  std::unordered_set<int> watches_;
  uint64_t generation_ = 0;
  bool broken_ = false, gitignore_touched_ = false;
  std::string reason_;
};

}  // namespace motor
