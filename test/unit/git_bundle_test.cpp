// The bundle header the runner reads itself before index-pack: what it takes and what it refuses.
#include "protocol/git_bundle.hpp"

#include <gtest/gtest.h>

#include <string>

namespace motor::protocol {
namespace {

const std::string kA(40, 'a'), kB(40, 'b');

void expect_rejected(const std::string& head, const std::string& why) {
  auto h = parse_bundle_header(head);
  ASSERT_FALSE(h.ok()) << head;
  EXPECT_EQ(h.error().code, "bundle_rejected");
  EXPECT_NE(h.error().message.find(why), std::string::npos) << h.error().message;
}

TEST(GitBundleHeader, ReadsWhatTheClientWrites) {
  const std::string header = format_bundle_header(kA, "refs/motor/synthetic", {kB});
  auto h = parse_bundle_header(header + "PACK\0\0\0\2");
  ASSERT_TRUE(h.ok()) << h.error().message;
  ASSERT_EQ(h->refs.size(), 1u);
  EXPECT_EQ(h->refs[0].id, kA);
  EXPECT_EQ(h->refs[0].name, "refs/motor/synthetic");
  EXPECT_EQ(h->prerequisites, std::vector<std::string>{kB});
  EXPECT_EQ(h->pack_offset, header.size());
}

TEST(GitBundleHeader, ReadsGitsOwnV2AndV3) {
  auto h = parse_bundle_header("# v2 git bundle\n-" + kB + " subject line\n" + kA + " refs/heads/main\n\nPACK");
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h->refs[0].name, "refs/heads/main");
  h = parse_bundle_header("# v3 git bundle\n@object-format=sha1\n" + kA + " refs/motor/synthetic\n\nPACK");
  ASSERT_TRUE(h.ok()) << h.error().message;
}

TEST(GitBundleHeader, RefusesWhatIsNotOne) {
  expect_rejected("", "no header line");
  expect_rejected("PACK\n", "unknown signature");
  expect_rejected("# v9 git bundle\n" + kA + " r\n\nPACK", "unknown signature");
  expect_rejected("# v2 git bundle\n@object-format=sha1\n" + kA + " r\n\nPACK", "unsupported capability");
  expect_rejected("# v3 git bundle\n@filter=blob:none\n" + kA + " r\n\nPACK", "unsupported capability");
  expect_rejected("# v3 git bundle\n@object-format=sha256\n" + kA + " r\n\nPACK", "unsupported capability");
  expect_rejected("# v2 git bundle\n-xyz\n" + kA + " r\n\nPACK", "malformed prerequisite");
  expect_rejected("# v2 git bundle\n" + kA + "\n\nPACK", "malformed ref line");
  expect_rejected("# v2 git bundle\n" + kA + " has space\n\nPACK", "malformed ref line");
  expect_rejected("# v2 git bundle\n" + std::string(40, 'G') + " r\n\nPACK", "malformed ref line");
  expect_rejected("# v2 git bundle\n\nPACK", "names no ref");
  expect_rejected("# v2 git bundle\n" + kA + " r\n", "does not end");
  expect_rejected("# v2 git bundle\n" + kA + " r\n\nJUNK", "no pack");
  std::string long_head = "# v2 git bundle\n";
  while (long_head.size() < kMaxBundleHeaderBytes) long_head += "-" + kB + " x\n";
  expect_rejected(long_head.substr(0, kMaxBundleHeaderBytes), "longer than");
}

}  // namespace
}  // namespace motor::protocol
