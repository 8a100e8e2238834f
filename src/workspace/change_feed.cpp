#include "workspace/change_feed.hpp"

#include <algorithm>

namespace motor::workspace {
namespace {

constexpr int kMaxFeeds = 32;  // of root's 128 inotify instances (fs.inotify.max_user_instances)

size_t budget() { return InotifyTree::user_watch_limit(16384) / 2; }

}  // namespace

std::atomic<size_t> ChangeFeed::in_use_{0};
std::atomic<int> ChangeFeed::open_{0};

ChangeFeed::ChangeFeed(const std::string& root, const std::set<std::string>& skip, size_t max_watches)
    : tree_(root, skip, max_watches, false) {}

std::shared_ptr<ChangeFeed> ChangeFeed::start(const std::string& root, const std::set<std::string>& skip, std::string* why) {
  if (open_.fetch_add(1) >= kMaxFeeds) {
    open_.fetch_sub(1);
    *why = "the runner's feeds are all in use";
    return nullptr;
  }
  const size_t total = budget(), used = in_use_.load();
  std::shared_ptr<ChangeFeed> feed(new ChangeFeed(root, skip, total > used ? total - used : 0));
  if (!feed->tree_.start()) {
    *why = feed->tree_.reason();
    return nullptr;  // its destructor gives the slot back
  }
  feed->reserved_ = feed->tree_.watches();
  in_use_.fetch_add(feed->reserved_);
  return feed;
}

ChangeFeed::~ChangeFeed() {
  in_use_.fetch_sub(reserved_);
  open_.fetch_sub(1);
}

bool ChangeFeed::changed() {
  std::lock_guard lock(mu_);
  tree_.drain();
  return tree_.generation() != 0 || tree_.broken();
}

}  // namespace motor::workspace
