// The keyed hash behind opaque workspace directory names (workspace/workspace_names.hpp).
#include "workspace/workspace_names.hpp"

#include <gtest/gtest.h>

#include <string>

namespace motor::workspace {
namespace {

SipKey reference_key() {
  SipKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i);
  return k;
}

std::string bytes(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i));
  return s;
}

// The reference vectors of the SipHash paper (key 00..0f, message 00..n-1).
TEST(SipHash24, ReferenceVectors) {
  EXPECT_EQ(siphash24(reference_key(), ""), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(siphash24(reference_key(), bytes(15)), 0xa129ca6149be45e5ULL);
}

TEST(SipHash24, EveryByteAndTheKeyMatter) {
  const SipKey k = reference_key();
  SipKey other = k;
  other[15] ^= 1;
  const std::string m = bytes(23);
  EXPECT_NE(siphash24(k, m), siphash24(other, m));
  for (size_t i = 0; i < m.size(); ++i) {
    std::string changed = m;
    changed[i] ^= 0x40;
    EXPECT_NE(siphash24(k, m), siphash24(k, changed)) << i;
  }
  EXPECT_NE(siphash24(k, bytes(8)), siphash24(k, bytes(8) + std::string(1, '\0')));  // the length counts
}

}  // namespace
}  // namespace motor::workspace
