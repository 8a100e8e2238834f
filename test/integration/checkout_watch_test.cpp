// The client's checkout watcher (src/client/checkout_watch.hpp; issue 20: the no-change run): a
// fingerprint taken after the watcher answered is vouched for by the same answer alone, and every
// kind of change ends that: an edit of the same size, one that puts the mtime back, a new file, a
// file in a directory made after the watcher started, a deletion, a chmod, a rename, a symlink, a
// write through a shared mapping, a write through a hard link from outside the checkout. Changes
// below a directory git ignores wholly do not; a .gitignore or git's exclude file ends the watcher,
// and so does the removal of its checkout or its socket. The real `motor` binary runs the watcher;
// the fingerprint is the client's own code, as a sync calls it.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "client/checkout_fingerprint.hpp"
#include "client/checkout_watch.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

extern char** environ;

namespace motor::test {
namespace {

using client::Vouched;
using namespace std::chrono_literals;

class CheckoutWatch : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(access("/usr/bin/git", X_OK) == 0, "git is installed by scripts/setup");
    base_ = make_temp_dir();
    repo_ = base_ + "/repo";
    sh(base_, git_init_script("repo") +
                  " && printf 'target/\\n' > .gitignore && mkdir -p src target/deep ../outside && "
                  "for i in 1 2 3 4 5; do echo line $i > f$i.txt; done && echo 'fn main() {}' > src/main.rs && "
                  "echo built > target/deep/out && git add -A && git commit -qm init");
    socket_ = client::checkout_watch_socket(repo_);
    ASSERT_FALSE(socket_.empty());
    start_watcher();
  }
  void TearDown() override {
    stop_watcher();
    remove_tree(base_);
  }

  void start_watcher() {
    std::string exe = MOTOR_CLIENT_BIN, flag = client::kCheckoutWatcherFlag;
    char* argv[] = {exe.data(), flag.data(), repo_.data(), socket_.data(), nullptr};
    ASSERT_EQ(posix_spawn(&watcher_, exe.c_str(), nullptr, nullptr, argv, environ), 0);
    for (int i = 0; i < 500 && !ask(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(ask().has_value()) << "the watcher never answered";
  }
  // True if the watcher ended within 5 s (and is reaped).
  bool watcher_ended() {
    for (int i = 0; i < 500; ++i) {
      if (waitpid(watcher_, nullptr, WNOHANG) == watcher_) {
        watcher_ = -1;
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  void stop_watcher() {
    if (watcher_ <= 0) return;
    kill(watcher_, SIGTERM);
    waitpid(watcher_, nullptr, 0);
    watcher_ = -1;
  }

  std::optional<client::WatchState> ask() {
    bool start_one = false;
    return client::ask_checkout_watcher(socket_, repo_, &start_one);
  }
  // What a sync does: the watcher's answer first, then the fingerprint's start and `git add`.
  void fingerprint() {
    std::this_thread::sleep_for(20ms);  // every file older than the clock reading
    auto watch = ask();
    ASSERT_TRUE(watch.has_value());
    auto start = client::begin_fingerprint(repo_, repo_ + "/.git", base_);
    ASSERT_TRUE(start.usable);
    start.watch = watch;
    const std::string env = "GIT_INDEX_FILE=" + base_ + "/private-index ";
    sh(repo_, env + "git add -A");
    tree_ = sh(repo_, env + "git write-tree");
    tree_.pop_back();
    client::save_fingerprint(fp_(), repo_, tree_, base_ + "/private-index", start);
  }
  std::string fp_() const { return base_ + "/fingerprint"; }
  Vouched vouched() {
    Vouched how = Vouched::kNot;
    auto tree = client::unchanged_tree(fp_(), repo_, ask(), &how);
    if (tree) {
      EXPECT_EQ(*tree, tree_);
    }
    return how;
  }

  std::string base_, repo_, socket_, tree_;
  pid_t watcher_ = -1;
};

TEST_F(CheckoutWatch, AnUntouchedCheckoutIsVouchedForByItsWatcherAlone) {
  fingerprint();
  EXPECT_EQ(vouched(), Vouched::kByWatcher);
  EXPECT_EQ(vouched(), Vouched::kByWatcher);
}

TEST_F(CheckoutWatch, EveryKindOfChangeEndsTheVouching) {
  sh(repo_, "mkdir later");  // made after the watcher started: watched from its event on
  for (const std::string change : {
           "printf 'line 9\\n' > f1.txt",
           "touch -r f2.txt ../stamp && printf 'LINE 2\\n' > f2.txt && touch -r ../stamp f2.txt",
           "echo new > new.txt",
           "echo inside > later/inside.txt",
           "mkdir -p a/b && echo deep > a/b/c.txt",
           "rm f3.txt",
           "chmod +x f4.txt",
           "mv f5.txt f6.txt",
           "ln -s f1.txt link",
           "python3 -c \"import mmap; f = open('src/main.rs', 'r+b'); m = mmap.mmap(f.fileno(), 0); m[0:2] = b'FN'\"",
       }) {
    fingerprint();
    ASSERT_EQ(vouched(), Vouched::kByWatcher) << "before: " << change;
    sh(repo_, change);
    EXPECT_EQ(vouched(), Vouched::kNot) << change;
  }
}

TEST_F(CheckoutWatch, AWriteThroughAHardLinkFromOutsideIsSeen) {
  sh(repo_, "ln f1.txt ../outside/f1");
  fingerprint();
  ASSERT_EQ(vouched(), Vouched::kByWatcher);
  // Same size, mtime put back, through the name outside: only the file's own mark hears it.
  sh(repo_, "touch -r f1.txt ../stamp && printf 'LINE 1\\n' > ../outside/f1 && touch -r ../stamp ../outside/f1");
  EXPECT_EQ(vouched(), Vouched::kNot);
  fingerprint();
  ASSERT_EQ(vouched(), Vouched::kByWatcher);
  sh(repo_, "ln f2.txt ../outside/f2");
  EXPECT_EQ(vouched(), Vouched::kNot) << "a new link changes the file's link count";
}

TEST_F(CheckoutWatch, DirectoriesGitIgnoresWhollyAreNotEntered) {
  auto state = ask();
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->unwatched, std::vector<std::string>{"target/"});
  fingerprint();
  sh(repo_, "echo more > target/deep/out && echo o > target/deep/other");
  EXPECT_EQ(vouched(), Vouched::kByWatcher);
  sh(repo_, "echo top > target/new");  // an entry of the directory itself: as its ctime would show
  EXPECT_EQ(vouched(), Vouched::kNot);
}

TEST_F(CheckoutWatch, AFileTrackedBelowAnIgnoredDirectoryIsNeverVouchedForByTheWatcher) {
  sh(repo_, "git add -f target/deep/out && git commit -qm forced");
  std::this_thread::sleep_for(20ms);
  auto start = client::begin_fingerprint(repo_, repo_ + "/.git", base_);
  start.watch = ask();
  const std::string env = "GIT_INDEX_FILE=" + repo_ + "/.git/index ";
  tree_ = sh(repo_, env + "git write-tree");
  tree_.pop_back();
  client::save_fingerprint(fp_(), repo_, tree_, repo_ + "/.git/index", start);
  EXPECT_EQ(vouched(), Vouched::kByStats);  // the watcher does not watch target/deep/out
}

TEST_F(CheckoutWatch, AGitignoreChangeEndsTheWatcher) {
  sh(repo_, "echo '*.tmp' >> .gitignore");
  EXPECT_FALSE(ask().has_value());
  EXPECT_TRUE(watcher_ended());
}

TEST_F(CheckoutWatch, AnExcludeFileChangeEndsTheWatcher) {
  sh(repo_, "mkdir -p .git/info && echo '*.tmp' >> .git/info/exclude");
  EXPECT_FALSE(ask().has_value());
  EXPECT_TRUE(watcher_ended());
}

TEST_F(CheckoutWatch, TheWatcherEndsWithItsCheckout) {
  remove_tree(repo_);
  EXPECT_TRUE(watcher_ended());
  struct stat st {};
  EXPECT_NE(lstat(socket_.c_str(), &st), 0) << "its socket is removed";
}

TEST_F(CheckoutWatch, TheWatcherEndsWhenItsSocketIsRemoved) {
  unlink(socket_.c_str());
  EXPECT_TRUE(watcher_ended());
}

TEST_F(CheckoutWatch, ASecondWatcherForTheSameCheckoutGivesUp) {
  std::string exe = MOTOR_CLIENT_BIN, flag = client::kCheckoutWatcherFlag;
  char* argv[] = {exe.data(), flag.data(), repo_.data(), socket_.data(), nullptr};
  pid_t second = -1;
  ASSERT_EQ(posix_spawn(&second, exe.c_str(), nullptr, nullptr, argv, environ), 0);
  int status = -1;
  ASSERT_EQ(waitpid(second, &status, 0), second);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(ask().has_value()) << "the first one still answers";
}

}  // namespace
}  // namespace motor::test
