#include "runner/admission.hpp"

#include <gtest/gtest.h>

#include "runner/cpu_claims.hpp"

namespace motor::runner {
namespace {

QueueEntry entry(const std::string& id, PriorityClass p = PriorityClass::kBatch, uint64_t deadline = 1000) {
  QueueEntry e;
  e.job_id = id;
  e.priority = p;
  e.deadline_ms = deadline;
  return e;
}

TEST(AdmissionQueue, IsFifoWithinAClass) {
  AdmissionQueue q(10);
  EXPECT_EQ(q.push(entry("a")), 1u);
  EXPECT_EQ(q.push(entry("b")), 2u);
  EXPECT_EQ(q.push(entry("c")), 3u);
  EXPECT_EQ(q.pop_head().job_id, "a");
  EXPECT_EQ(q.pop_head().job_id, "b");
  EXPECT_EQ(q.pop_head().job_id, "c");
  EXPECT_TRUE(q.empty());
}

TEST(AdmissionQueue, InteractiveGoesBeforeBatch) {
  AdmissionQueue q(10);
  q.push(entry("batch1"));
  EXPECT_EQ(q.push(entry("int1", PriorityClass::kInteractive)), 1u);
  EXPECT_EQ(q.position("batch1"), 2u);
  EXPECT_EQ(q.head()->job_id, "int1");
}

TEST(AdmissionQueue, RemoveAndPositions) {
  AdmissionQueue q(10);
  q.push(entry("a"));
  q.push(entry("b"));
  EXPECT_TRUE(q.remove("a"));
  EXPECT_FALSE(q.remove("a"));
  EXPECT_EQ(q.position("b"), 1u);
  EXPECT_EQ(q.position("a"), std::nullopt);
}

TEST(AdmissionQueue, ExpiresOnlyWhatIsPastItsDeadline) {
  AdmissionQueue q(10);
  q.push(entry("soon", PriorityClass::kBatch, 100));
  q.push(entry("later", PriorityClass::kBatch, 500));
  auto gone = q.expire(200);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].job_id, "soon");
  EXPECT_EQ(q.size(), 1u);
}

TEST(AdmissionQueue, KnowsWhenItIsFull) {
  AdmissionQueue q(2);
  q.push(entry("a"));
  EXPECT_FALSE(q.full());
  q.push(entry("b"));
  EXPECT_TRUE(q.full());
}

// A job waiting on its own busy workspace does not hold up the ones behind it (issue 15 item 1).
TEST(AdmissionQueue, AnEntryThatWaitsOnItsOwnDoesNotHoldUpTheRest) {
  AdmissionQueue q(8);
  q.push(entry("busy-ws", PriorityClass::kInteractive));
  q.push(entry("other-ws"));
  q.push(entry("busy-ws-too"));
  auto waits = [](const QueueEntry& e) { return e.job_id.rfind("busy", 0) == 0; };
  const QueueEntry* next = q.first_not(waits);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->job_id, "other-ws");
  auto taken = q.take("other-ws");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->job_id, "other-ws");
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.first_not(waits), nullptr);
  EXPECT_FALSE(q.take("other-ws").has_value());
  EXPECT_EQ(q.head()->job_id, "busy-ws");  // order kept for the rest
}

TEST(CpuClaimsAdmission, NeverDoubleBooksACoreWithoutOversubscription) {
  CpuClaims claims({{0}, {1}});
  EXPECT_TRUE(claims.can_claim(1, 1));
  auto a = claims.claim(1);
  auto b = claims.claim(1);
  EXPECT_FALSE(claims.can_claim(1, 1));  // both cores taken
  EXPECT_TRUE(claims.can_claim(1, 2));   // a factor of 2 allows two claims per core
  claims.release(a);
  EXPECT_TRUE(claims.can_claim(1, 1));
  EXPECT_FALSE(claims.can_claim(2, 1));  // needs both cores
  (void)b;
}

}  // namespace
}  // namespace motor::runner
