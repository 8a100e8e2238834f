#include "runner/cpu_claims.hpp"

#include <gtest/gtest.h>

namespace motor::runner {
namespace {

TEST(CpuClaims, ParsesKernelCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_TRUE(parse_cpu_list("x-y").empty());
}

TEST(CpuClaims, FormatsClaimsAsRanges) {
  CpuClaim c;
  c.cpus = {0, 1, 2, 5, 7, 8};
  EXPECT_EQ(c.list(), "0-2,5,7-8");
}

TEST(CpuClaims, ClaimsWholeCoresWithTheirSiblings) {
  CpuClaims claims({{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  auto a = claims.claim(1);
  EXPECT_EQ(a.cpus, (std::vector<int>{0, 4}));
  EXPECT_FALSE(a.overlapping);
  auto b = claims.claim(3);
  EXPECT_EQ(b.cpus, (std::vector<int>{1, 2, 5, 6}));
  EXPECT_EQ(claims.claimed_cores(), 3u);
}

TEST(CpuClaims, OverlapsLeastLoadedCoresWhenFullAndSaysSo) {
  CpuClaims claims({{0}, {1}});
  auto a = claims.claim(1);
  auto b = claims.claim(1);
  EXPECT_EQ(a.cpus, std::vector<int>{0});
  EXPECT_EQ(b.cpus, std::vector<int>{1});
  auto c = claims.claim(1);
  EXPECT_TRUE(c.overlapping);
  claims.release(a);
  claims.release(c);
  auto d = claims.claim(1);
  EXPECT_EQ(d.cpus, std::vector<int>{0});  // the core a and c released is free again
  EXPECT_FALSE(d.overlapping);
}

TEST(CpuClaims, ReleaseFreesTheCores) {
  CpuClaims claims({{0}, {1}, {2}});
  auto a = claims.claim(2);
  EXPECT_EQ(claims.claimed_cores(), 2u);
  claims.release(a);
  EXPECT_EQ(claims.claimed_cores(), 0u);
}

}  // namespace
}  // namespace motor::runner
