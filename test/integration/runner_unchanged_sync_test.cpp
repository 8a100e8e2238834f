// `motor run` in a checkout that did not change since its last sync starts no git process and no
// runner-side checkout (issue 20), and every kind of local change is still synced: a tracked edit
// in the same second as the last sync, an edit that keeps the mtime, a new untracked file (also in
// a directory with no tracked file, and in a new directory), a deletion. Whether git ran is seen
// through GIT_TRACE (git's own trace lines, in a file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include <fmt/format.h>

#include "client/checkout_fingerprint.hpp"
#include "client/checkout_watch.hpp"
#include "support/checkout_fixture.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

class RunnerUnchangedSync : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override {
    return "printf 'target/\\n*.log\\n' > .gitignore && mkdir -p src empty && echo 'fn main() {}' > src/main.rs && "
           "for i in 1 2 3 4 5; do echo line $i > f$i.txt; done";
  }
  // `motor run -c command` in the checkout; git's trace (GIT_TRACE) goes to a file of its own
  // (the client collects git's stderr), emptied before each run.
  CommandResult run(const std::string& command) {
    write_file(trace(), "");
    std::vector<std::string> env = env_;
    env.push_back("GIT_TRACE=" + trace());
    auto r = runner_->client_in(repo_, {"run", "-w", "k", "-c", command}, env);
    r.err += read_file(trace());
    return r;
  }
  std::string trace() const { return base_ + "/git-trace"; }
  static bool git_ran(const CommandResult& r) { return r.err.find("trace: ") != std::string::npos; }
  // A sync that leaves a fingerprint: its files are older than the sync's clock reading.
  void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }
  // The last sync left a fingerprint: a run with nothing changed starts no git.
  void expect_fast_run() {
    auto r = run("cat f4.txt");
    EXPECT_EQ(r.out, "line 4\n") << r.err;
    EXPECT_FALSE(git_ran(r)) << r.err;
  }

};

TEST_F(RunnerUnchangedSync, AnUnchangedCheckoutStartsNoGitAndJobChangesAreStillUndone) {
  settle();
  auto first = run("cat f1.txt");
  EXPECT_EQ(first.out, "line 1\n") << first.err;
  EXPECT_TRUE(git_ran(first)) << "the first sync runs git";
  expect_fast_run();
  // A job changes the workspace: the next run (nothing changed locally: no git) still sees the
  // caller's file, because the runner's scan marked the workspace changed and its prepare undoes it.
  EXPECT_EQ(run("echo by-the-job > f2.txt").exit_code, 0);
  auto after = run("cat f2.txt");
  EXPECT_EQ(after.out, "line 2\n") << after.err;
  EXPECT_FALSE(git_ran(after)) << after.err;
}

TEST_F(RunnerUnchangedSync, EveryLocalChangeIsSyncedEvenWithinTheSameSecond) {
  settle();
  ASSERT_EQ(run("true").exit_code, 0);
  expect_fast_run();
  // Same size, immediately after the fingerprint was taken (the same second, likely the same tick).
  sh(repo_, "printf 'line 9\\n' > f1.txt");
  auto edited = run("cat f1.txt");
  EXPECT_EQ(edited.out, "line 9\n") << edited.err;
  EXPECT_TRUE(git_ran(edited));
  settle();
  expect_fast_run();
  // Same size and the old mtime put back: only the ctime tells.
  sh(repo_, "touch -r f3.txt ../stamp && printf 'LINE 3\\n' > f3.txt && touch -r ../stamp f3.txt");
  auto kept_mtime = run("cat f3.txt");
  EXPECT_EQ(kept_mtime.out, "LINE 3\n") << kept_mtime.err;
  settle();
  expect_fast_run();
  sh(repo_, "echo brand > brand.txt");
  EXPECT_EQ(run("cat brand.txt").out, "brand\n");
  settle();
  expect_fast_run();
  sh(repo_, "echo inside > empty/inside.txt");  // a directory that held no tracked file
  EXPECT_EQ(run("cat empty/inside.txt").out, "inside\n");
  settle();
  expect_fast_run();
  sh(repo_, "mkdir -p a/b && echo deep > a/b/c.txt");
  EXPECT_EQ(run("cat a/b/c.txt").out, "deep\n");
  settle();
  expect_fast_run();
  sh(repo_, "rm f5.txt");
  EXPECT_EQ(run("test ! -e f5.txt && echo gone").out, "gone\n");
  settle();
  expect_fast_run();
  // An ignored file changes nothing the job sees (its directory's stat moved: a full sync, still right).
  sh(repo_, "echo noise > debug.log");
  EXPECT_EQ(run("test ! -e debug.log && echo absent").out, "absent\n");
}

// The client starts a watcher for the checkout (src/client/checkout_watch.hpp): by the third run
// the fingerprint names its answer, and the runs still start no git. It ends when the checkout is
// removed, although `motor run` started it from inside the checkout.
TEST_F(RunnerUnchangedSync, TheCheckoutsWatcherVouchesForLaterRunsAndEndsWithTheCheckout) {
  // No .gitignore: its removal alone would end the watcher, whatever happens to the root.
  sh(repo_, "git rm -q .gitignore && git commit -qm no-ignores");
  settle();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(run("true").exit_code, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the watcher walks the tree
  }
  const std::string fingerprint = read_file(client::fingerprint_path(base_ + "/cache", repo_));
  EXPECT_NE(fingerprint.find("\nwatch "), std::string::npos);
  EXPECT_EQ(fingerprint.find("\nwatch -\n"), std::string::npos) << "no watcher's answer in the fingerprint";
  expect_fast_run();
  const auto watchers = processes_with(std::string(client::kCheckoutWatcherFlag) + " " + repo_ + " ");
  ASSERT_EQ(watchers.size(), 1u);
  remove_tree(repo_);
  for (int i = 0; i < 500 && !processes_with(std::string(client::kCheckoutWatcherFlag) + " " + repo_ + " ").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(processes_with(std::string(client::kCheckoutWatcherFlag) + " " + repo_ + " ").empty())
      << "the watcher outlived its checkout";
}

TEST_F(RunnerUnchangedSync, IndexEntriesAreReadFromEveryIndexVersion) {
  for (int version : {2, 3, 4}) {
    const std::string index = fmt::format("{}/index-v{}", base_, version);
    sh(repo_, fmt::format("GIT_INDEX_FILE={} git -c index.version={} add -A", index, version));
    if (version == 3) sh(repo_, fmt::format("GIT_INDEX_FILE={} git update-index --index-version=3", index));
    auto entries = client::read_index_entries(index);
    ASSERT_TRUE(entries.has_value()) << version;
    const std::string listed = sh(repo_, fmt::format("GIT_INDEX_FILE={} git ls-files", index));
    std::string mine;
    for (const auto& [path, rec] : *entries) mine += path + "\n";
    EXPECT_EQ(mine, listed) << version;
  }
  // An assume-unchanged entry is one the fingerprint cannot vouch for.
  const std::string index = base_ + "/index-assumed";
  sh(repo_, fmt::format("GIT_INDEX_FILE={0} git add -A && GIT_INDEX_FILE={0} git update-index --assume-unchanged f1.txt", index));
  EXPECT_FALSE(client::read_index_entries(index).has_value());
}

}  // namespace
}  // namespace motor::test
