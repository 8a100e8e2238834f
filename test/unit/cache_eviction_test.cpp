// What eviction removes (runner/cache_eviction.hpp): the age rule, the size rule's order and its
// exceptions (in use, a repository's newest target), du's output, and target uses.
#include "runner/cache_eviction.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motor::runner {
namespace {

CacheItem item(std::string path, int64_t bytes, int64_t last_used_ms, CacheItemKind kind = CacheItemKind::kFill) {
  CacheItem i;
  i.path = std::move(path);
  i.name = "n";
  i.kind = kind;
  i.bytes = bytes;
  i.last_used_ms = last_used_ms;
  return i;
}

std::vector<std::string> paths(const std::vector<Eviction>& plan) {
  std::vector<std::string> out;
  for (const Eviction& e : plan) out.push_back(e.item.path + (e.reason == EvictReason::kAge ? ":age" : ":size"));
  return out;
}

TEST(CacheEvictionPlan, AgeTakesAnythingUnusedTooLongButNothingInUse) {
  std::vector<CacheItem> items = {item("old", 1, 0), item("busy", 1, 0), item("new", 1, 9000),
                                  item("newest", 1, 0, CacheItemKind::kTarget)};
  items[1].in_use = true;
  items[3].newest_target = true;
  EXPECT_EQ(paths(plan_evictions(items, {0, 5}, 10000)), (std::vector<std::string>{"old:age", "newest:age"}));
  EXPECT_TRUE(plan_evictions(items, {0, 0}, 10000).empty());  // 0: no age limit
}

TEST(CacheEvictionPlan, SizeTakesTheLeastRecentlyUsedUntilUnderAndNeverANewestTarget) {
  std::vector<CacheItem> items = {item("b", 40, 200), item("a", 40, 100), item("c", 40, 300),
                                  item("newest", 500, 50, CacheItemKind::kTarget), item("busy", 40, 10)};
  items[3].newest_target = true;
  items[4].in_use = true;
  // 660 bytes against 620: a (the oldest that may go) is enough.
  EXPECT_EQ(paths(plan_evictions(items, {620, 0}, 1000)), (std::vector<std::string>{"a:size"}));
  // Against 1 byte: all that may go, oldest first; the newest target and the busy one stay.
  EXPECT_EQ(paths(plan_evictions(items, {1, 0}, 1000)), (std::vector<std::string>{"a:size", "b:size", "c:size"}));
  EXPECT_TRUE(plan_evictions(items, {0, 0}, 1000).empty());  // 0: no size limit
}

TEST(CacheEvictionPlan, OfOneRepositoryTheFillWorkspaceGoesBeforeALeftoverTarget) {
  std::vector<CacheItem> items = {item("left", 10, 100, CacheItemKind::kTarget), item("fill", 10, 100)};
  EXPECT_EQ(paths(plan_evictions(items, {15, 0}, 1000)), (std::vector<std::string>{"fill:size"}));
}

TEST(CacheEvictionDu, ParsesItsLinesAndSkipsTheRest) {
  const auto m = parse_du_output("4096\t1700000000\tfills/abc\nnot a line\n12\tx\ty\n8192\t1700000001\t/srv/with\ttab\n");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].path, "fills/abc");
  EXPECT_EQ(m[0].bytes, 4096);
  EXPECT_EQ(m[0].mtime_s, 1700000000);
  EXPECT_EQ(m[1].path, "/srv/with\ttab");
}

TEST(CacheTargetUses, AUseHoldsUntilDroppedAndMayOutliveTheRegistry) {
  TargetUses::Use outliving;
  {
    TargetUses uses;
    auto a = uses.hold("r");
    {
      auto b = uses.hold("r");
      EXPECT_TRUE(uses.in_use("r"));
    }
    EXPECT_TRUE(uses.in_use("r"));
    TargetUses::Use moved = std::move(a);
    EXPECT_TRUE(uses.in_use("r"));
    moved = TargetUses::Use();
    EXPECT_FALSE(uses.in_use("r"));
    outliving = uses.hold("s");
  }
  outliving = TargetUses::Use();  // the registry is gone: nothing to release into
}

}  // namespace
}  // namespace motor::runner
