// A tree watched with inotify (src/base/inotify_tree.hpp), as the checkout watcher and the
// workspace's change feed use it: each kind of change moves the generation, through any name of a
// file; a directory made later is watched from its event on; a skipped directory is not entered;
// the root's removal, a moved directory, lost events and the watch limit leave it unable to tell.
// Also built under ASan and UBSan (the event buffer is taken apart by hand).
#include "base/inotify_tree.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <set>
#include <fstream>
#include <string>

namespace motor {
namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class InotifyTreeTest : public test::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TempDirTest::SetUp());
    root_ = dir_ + "/tree";
    for (const std::string& d : {root_, root_ + "/src", root_ + "/target", root_ + "/target/debug", root_ + "/.git", dir_ + "/outside"}) {
      ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
    }
    for (const char* f : {"/a.txt", "/src/main.rs", "/target/debug/bin", "/.git/index"}) write(root_ + f, "old\n");
  }

  // A watch of the tree, started, with nothing heard yet.
  InotifyTree& watch(std::set<std::string> skip = {"target"}, size_t max = 1000, bool skip_git = true) {
    tree_.emplace(root_, std::move(skip), max, skip_git);
    EXPECT_TRUE(tree_->start()) << tree_->reason();
    tree_->drain();
    EXPECT_EQ(tree_->generation(), 0u);
    return *tree_;
  }
  // Whether the change was heard (the generation moved), and the tree can still tell.
  bool heard(InotifyTree& t) {
    const uint64_t before = t.generation();
    t.drain();
    return t.generation() != before;
  }

  std::string root_;
  std::optional<InotifyTree> tree_;
};

TEST_F(InotifyTreeTest, NothingChangedNothingHeard) {
  auto& t = watch();
  std::ifstream(root_ + "/a.txt").get();  // a read is no change
  EXPECT_FALSE(heard(t));
}

TEST_F(InotifyTreeTest, EachKindOfChangeIsHeard) {
  auto& t = watch();
  write(root_ + "/a.txt", "new\n");
  EXPECT_TRUE(heard(t));
  ASSERT_EQ(chmod((root_ + "/src/main.rs").c_str(), 0700), 0);
  EXPECT_TRUE(heard(t));
  write(root_ + "/src/new.rs", "x");
  EXPECT_TRUE(heard(t));
  ASSERT_EQ(rename((root_ + "/src/new.rs").c_str(), (root_ + "/src/moved.rs").c_str()), 0);
  EXPECT_TRUE(heard(t));
  ASSERT_EQ(unlink((root_ + "/src/moved.rs").c_str()), 0);
  EXPECT_TRUE(heard(t));
  ASSERT_EQ(symlink("a.txt", (root_ + "/link").c_str()), 0);
  EXPECT_TRUE(heard(t));
  EXPECT_FALSE(t.broken());
}

TEST_F(InotifyTreeTest, AWriteThroughAHardLinkFromOutsideIsHeard) {
  ASSERT_EQ(link((root_ + "/a.txt").c_str(), (dir_ + "/outside/a").c_str()), 0);
  auto& t = watch();
  write(dir_ + "/outside/a", "through the other name\n");
  EXPECT_TRUE(heard(t));
  ASSERT_EQ(link((root_ + "/src/main.rs").c_str(), (dir_ + "/outside/m").c_str()), 0);
  EXPECT_TRUE(heard(t)) << "a new link changes the file's link count";
}

TEST_F(InotifyTreeTest, ADirectoryMadeLaterIsWatchedFromItsEvent) {
  auto& t = watch();
  ASSERT_EQ(mkdir((root_ + "/later").c_str(), 0755), 0);
  EXPECT_TRUE(heard(t));
  write(root_ + "/later/inside", "x");
  EXPECT_TRUE(heard(t));
  EXPECT_FALSE(t.broken());
}

TEST_F(InotifyTreeTest, ASkippedDirectoryIsWatchedForItsOwnEntriesOnly) {
  auto& t = watch();
  write(root_ + "/target/debug/bin", "rebuilt\n");
  ASSERT_EQ(mkdir((root_ + "/target/debug/deps").c_str(), 0755), 0);
  EXPECT_FALSE(heard(t));
  write(root_ + "/target/new", "x");
  EXPECT_TRUE(heard(t));
}

TEST_F(InotifyTreeTest, GitDirectoriesAreLeftOutWhenAsked) {
  auto& t = watch({"target"}, 1000, true);
  write(root_ + "/.git/index", "new\n");
  EXPECT_FALSE(heard(t));
  auto& all = watch({"target"}, 1000, false);
  write(root_ + "/.git/index", "newer\n");
  EXPECT_TRUE(heard(all));
}

TEST_F(InotifyTreeTest, AGitignoreIsNoticed) {
  auto& t = watch();
  write(root_ + "/src/.gitignore", "*.o\n");
  EXPECT_TRUE(heard(t));
  EXPECT_TRUE(t.gitignore_touched());
}

TEST_F(InotifyTreeTest, AMovedDirectoryLeavesItUnableToTell) {
  auto& t = watch();
  ASSERT_EQ(rename((root_ + "/src").c_str(), (root_ + "/source").c_str()), 0);
  t.drain();
  EXPECT_TRUE(t.broken());
}

TEST_F(InotifyTreeTest, TheRootsRemovalLeavesItUnableToTell) {
  auto& t = watch();
  ASSERT_EQ(std::system(("rm -rf " + root_).c_str()), 0);
  t.drain();
  EXPECT_TRUE(t.broken());
}

TEST_F(InotifyTreeTest, ATreeBiggerThanItsLimitIsRefused) {
  InotifyTree t(root_, {}, 3, true);
  EXPECT_FALSE(t.start());
  EXPECT_NE(t.reason().find("more than 3"), std::string::npos) << t.reason();
}

TEST_F(InotifyTreeTest, LostEventsLeaveItUnableToTell) {
  auto& t = watch();
  // More events than the kernel queues for one instance (fs.inotify.max_queued_events), unread:
  // each write below makes at least two (modified, closed after writing).
  std::ifstream limit_file("/proc/sys/fs/inotify/max_queued_events");
  int limit = 16384;
  limit_file >> limit;
  for (int i = 0; i < limit; ++i) write(root_ + "/src/f" + std::to_string(i % 100), std::to_string(i));
  t.drain();
  EXPECT_TRUE(t.broken());
  EXPECT_NE(t.reason().find("overflow"), std::string::npos) << t.reason();
}

}  // namespace
}  // namespace motor
