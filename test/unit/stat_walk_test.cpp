// The scan's baseline check (src/workspace/stat_walk.hpp): a tree is "unchanged since M" only if
// no inode reachable from its root changed at or after the filesystem stamp M. Each kind of change
// a job can make is caught; skipped directories are looked at but not entered; symlinks are not
// followed.
#include "workspace/stat_walk.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace motor::workspace {
namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class StatWalk : public test::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TempDirTest::SetUp());
    root_ = dir_ + "/ws";
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/src").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/target").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/target/debug").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/outside").c_str(), 0755), 0);
    for (const char* f : {"/a.txt", "/b.txt", "/src/main.rs", "/target/debug/bin", "/../outside/x"}) write(root_ + f, "old\n");
    ASSERT_EQ(symlink("a.txt", (root_ + "/link").c_str()), 0);
    ASSERT_EQ(symlink("../outside", (root_ + "/out").c_str()), 0);
  }
  // A stamp after everything above: past the clock tick the files were written in.
  FsStamp stamp() {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto s = filesystem_now(dir_ + "/clock");
    EXPECT_TRUE(s) << s.error().message;
    return s ? *s : FsStamp{};
  }
  // After `change`, the tree is no longer "unchanged since" a stamp taken before it.
  void expect_caught(const std::function<void()>& change, const std::string& what) {
    const FsStamp since = stamp();
    ASSERT_TRUE(unchanged_since(root_, skip_, since).unchanged) << what << ": changed before the change";
    change();
    const WalkVerdict v = unchanged_since(root_, skip_, since);
    EXPECT_FALSE(v.unchanged) << what << " was not seen";
  }
  std::string root_;
  std::set<std::string> skip_{"target"};
};

TEST_F(StatWalk, AnUntouchedTreeIsUnchangedWithOneOrTwoWorkers) {
  const FsStamp since = stamp();
  for (int threads : {1, 2}) {
    const WalkVerdict v = unchanged_since(root_, skip_, since, WalkLimits{.threads = threads});
    EXPECT_TRUE(v.unchanged) << v.reason;
    EXPECT_EQ(v.entries, 8u);  // root, a, b, src, main.rs, target (not entered), link, out
  }
  // Reading files changes nothing; a limit that is too small gives up.
  (void)std::system(("cat " + root_ + "/a.txt " + root_ + "/src/main.rs >/dev/null").c_str());
  EXPECT_TRUE(unchanged_since(root_, skip_, since).unchanged);
  EXPECT_FALSE(unchanged_since(root_, skip_, since, WalkLimits{.max_entries = 3}).unchanged);
}

TEST_F(StatWalk, EveryKindOfChangeIsSeen) {
  expect_caught([&] { write(root_ + "/a.txt", "new\n"); }, "an edit of the same size");
  expect_caught([&] { write(root_ + "/src/new.rs", "x"); }, "a new file in a subdirectory");
  expect_caught([&] { unlink((root_ + "/b.txt").c_str()); }, "a deletion");
  expect_caught([&] { chmod((root_ + "/src/main.rs").c_str(), 0755); }, "a chmod");
  expect_caught(
      [&] {
        struct stat st {};
        ASSERT_EQ(stat((root_ + "/a.txt").c_str(), &st), 0);
        write(root_ + "/a.txt", "NEW\n");
        const struct timespec keep[2] = {st.st_atim, st.st_mtim};
        ASSERT_EQ(utimensat(AT_FDCWD, (root_ + "/a.txt").c_str(), keep, 0), 0);
      },
      "an edit that puts the mtime back");
  expect_caught(
      [&] {
        unlink((root_ + "/link").c_str());
        ASSERT_EQ(symlink("src/main.rs", (root_ + "/link").c_str()), 0);
      },
      "a symlink swapped for another target");
  expect_caught([&] { ASSERT_EQ(rename((root_ + "/src/main.rs").c_str(), (root_ + "/src/lib.rs").c_str()), 0); },
                "a rename");
  expect_caught([&] { write(root_ + "/target/new", "x"); }, "an entry added to a skipped directory (its own ctime)");
}

TEST_F(StatWalk, ASkippedDirectoryIsNotEnteredAndSymlinksAreNotFollowed) {
  const FsStamp since = stamp();
  write(root_ + "/target/debug/bin", "rebuilt\n");  // inside target/debug: not looked at
  write(dir_ + "/outside/x", "changed\n");          // behind the symlink `out`
  EXPECT_TRUE(unchanged_since(root_, skip_, since).unchanged);
  // Not skipped: the same write is seen.
  EXPECT_FALSE(unchanged_since(root_, {}, since).unchanged);
}

TEST_F(StatWalk, AChangeInTheStampsOwnTickIsNeverUnchanged) {
  // A stamp taken right after a write may fall in the same clock tick: then the ctime equals it
  // and the tree must not count as unchanged (the racy case). Either way, no false "unchanged".
  write(root_ + "/a.txt", "tick\n");
  auto since = filesystem_now(dir_ + "/clock");
  ASSERT_TRUE(since);
  struct stat st {};
  ASSERT_EQ(stat((root_ + "/a.txt").c_str(), &st), 0);
  const bool same_tick = st.st_ctim.tv_sec == since->sec && st.st_ctim.tv_nsec == since->nsec;
  if (same_tick) {
    EXPECT_FALSE(unchanged_since(root_, skip_, *since).unchanged);
  }
  write(root_ + "/a.txt", "tock\n");
  EXPECT_FALSE(unchanged_since(root_, skip_, *since).unchanged);
}

TEST_F(StatWalk, AStampFromAnotherFilesystemIsRefused) {
  FsStamp since = stamp();
  since.dev += 1;
  const WalkVerdict v = unchanged_since(root_, skip_, since);
  EXPECT_FALSE(v.unchanged);
  EXPECT_NE(v.reason.find("another filesystem"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace motor::workspace
