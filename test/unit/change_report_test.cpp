// The changed-path report: parsing `git status -z` output and the .git state, and its fields.
#include <gtest/gtest.h>

#include <string>

#include "workspace/change_report.hpp"

namespace motor::workspace {
namespace {

using namespace std::string_literals;

TEST(ChangeReport, SortsStatusEntriesIntoChangesUntrackedAndIgnored) {
  const std::string out = " M src/a.rs\0 D gone.txt\0?? new file.txt\0!! target/\0!! node_modules/\0!! debug.log\0"
                          "!! dist/\0"s + std::string(kGitStateMarker) + "present=0\n";
  auto r = parse_scan_output(out);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->changes, (std::vector<std::string>{"src/a.rs", "gone.txt", "new file.txt"}));
  EXPECT_EQ(r->untracked, (std::vector<std::string>{"new file.txt"}));
  EXPECT_EQ(r->ignored_count, 1);  // target/, node_modules/ and dist/ are not counted
  EXPECT_EQ(r->ignored_samples, (std::vector<std::string>{"debug.log"}));
  // The directories git did not enter (the next scan's stat walk skips them too).
  EXPECT_EQ(r->ignored_dirs, (std::vector<std::string>{"target", "node_modules", "dist"}));
  auto json = encode_report(*r, GitState{});
  EXPECT_EQ(json.changes, R"(["src/a.rs","gone.txt","new file.txt"])");
  EXPECT_EQ(json.untracked_files, R"({"paths":["new file.txt"],"truncated":false})");
  EXPECT_EQ(json.ignored_writes, R"({"count":1,"sample_paths":["debug.log"]})");
  // Issue 17: reported with equal values when nothing changed (null means "not reported").
  EXPECT_EQ(json.git_state_changed,
            R"({"head_before":null,"head_after":null,"ref_before":null,"ref_after":null,"index_tree_before":null,)"
            R"("index_tree_after":null,"stash_count_before":0,"stash_count_after":0})");
}

TEST(ChangeReport, BoundsListsAndReportsGitStateChanges) {
  std::string out;
  for (int i = 0; i < 150; ++i) out += "?? u" + std::to_string(i) + '\0';
  for (int i = 0; i < 30; ++i) out += "!! i" + std::to_string(i) + ".o" + '\0';
  out += std::string(kGitStateMarker) + "present=1\nhead=" + std::string(40, 'a') + "\nref=refs/heads/main\nindex_tree=\nstash_count=2\n";
  auto r = parse_scan_output(out);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->untracked.size(), kMaxUntrackedListed);
  EXPECT_TRUE(r->untracked_truncated);
  EXPECT_EQ(r->ignored_count, 30);
  EXPECT_EQ(r->ignored_samples.size(), kMaxIgnoredSamples);
  EXPECT_TRUE(r->git.present);
  EXPECT_EQ(r->git.ref, "refs/heads/main");
  EXPECT_FALSE(r->git.index_tree);
  auto json = encode_report(*r, GitState{});
  EXPECT_EQ(json.git_state_changed,
            R"({"head_before":null,"head_after":")" + std::string(40, 'a') +
                R"(","ref_before":null,"ref_after":"refs/heads/main","index_tree_before":null,"index_tree_after":null,"stash_count_before":0,"stash_count_after":2})");
}

TEST(ChangeReport, RejectsOutputWithoutTheMarkerOrWithBrokenEntries) {
  EXPECT_FALSE(parse_scan_output(" M a\0"s));
  EXPECT_FALSE(parse_scan_output("M\0"s + std::string(kGitStateMarker)));
}

}  // namespace
}  // namespace motor::workspace
