// The guest's change listing (vm/guest_changes.hpp): the guest is untrusted, so every hostile
// shape of listing must be refused as a whole, never half-believed.
#include "vm/guest_changes.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motor::vm {
namespace {

std::string listing(const std::string& body) { return "motor-changes 1\n" + body + "end\n"; }

TEST(GuestChanges, AWellFormedListingIsBelievedAndEncodedSorted) {
  auto r = parse_guest_changes(listing("M src/main.rs\nA new dir/ä file\nD gone.txt\n"));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1], (GuestChange{GuestChange::Kind::kAdded, "new dir/ä file"}));
  const auto json = encode_guest_changes(*r);
  EXPECT_EQ(json.changes, R"(["gone.txt","new dir/ä file","src/main.rs"])");
  EXPECT_EQ(json.untracked_files, R"({"paths":["new dir/ä file"],"truncated":false})");
  EXPECT_EQ(json.ignored_writes, "null");
  EXPECT_EQ(json.git_state_changed, "null");
  EXPECT_FALSE(json.changes_truncated);
  auto empty = parse_guest_changes(listing(""));
  ASSERT_TRUE(empty);
  EXPECT_EQ(encode_guest_changes(*empty).changes, "[]");
}

TEST(GuestChanges, HostilePathsAreRefused) {
  for (const std::string& bad : std::vector<std::string>{"../etc/passwd", "a/../../b", "/etc/shadow", "./a", "a//b", "a/", "a/.", "..",
                                std::string("a\0b", 3), "a\tb", "a\rb", "a\x7f", "a\\..\\b", "bad\xff utf8",
                                "over\xC0\xAFlong", "surrogate\xED\xA0\x80", std::string(4097, 'a'),
                                std::string(256, 'n') + "/x"}) {
    EXPECT_FALSE(validate_listed_path(bad)) << bad;
    EXPECT_FALSE(parse_guest_changes(listing("M " + bad + "\n"))) << bad;
  }
  EXPECT_TRUE(validate_listed_path(std::string(255, 'n') + "/x"));
  EXPECT_TRUE(validate_listed_path("日本/ok..dots/.hidden"));
}

TEST(GuestChanges, MalformedListingsAreRefusedAsAWhole) {
  for (const std::string& bad : {std::string(""), std::string("M a\nend\n"),          // no header
                                std::string("motor-changes 2\nend\n"),                // another version
                                std::string("motor-changes 1\nM a\n"),                // no end: cut short
                                std::string("motor-changes 1\nM a\nend"),             // no final newline
                                std::string("motor-changes 1\nend\nM a\n"),           // after the end
                                std::string("motor-changes 1\nX a\nend\n"),           // unknown kind
                                std::string("motor-changes 1\nMa\nend\n"),            // no separator
                                std::string("motor-changes 1\nM \nend\n"),            // no path
                                std::string("motor-changes 1\nM a\nD a\nend\n")}) {  // twice
    EXPECT_FALSE(parse_guest_changes(bad)) << bad;
  }
}

TEST(GuestChanges, OversizedListingsAreRefusedNotTruncated) {
  std::string many;
  for (size_t i = 0; i <= kMaxListingEntries; ++i) many += "A f" + std::to_string(i) + "\n";
  auto r = parse_guest_changes(listing(many));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("entries"), std::string::npos) << r.error().message;
  auto big = parse_guest_changes(listing(std::string(kMaxListingBytes, 'x')));
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("bytes"), std::string::npos) << big.error().message;
}

TEST(GuestChanges, TheReportIsBoundedAsALinuxJobs) {
  std::vector<GuestChange> changes;
  for (size_t i = 0; i < kMaxReportedPaths + 10; ++i) changes.push_back({GuestChange::Kind::kAdded, "f" + std::to_string(i)});
  const auto json = encode_guest_changes(changes);
  EXPECT_TRUE(json.changes_truncated);
  EXPECT_NE(json.untracked_files.find("\"truncated\":true"), std::string::npos);
}

}  // namespace
}  // namespace motor::vm
