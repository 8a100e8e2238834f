// The runner's admission on a real libuv loop, in-process (as libuv tests its own handles): one
// job starts per loop iteration, none before its record is durable, a job waiting on its workspace
// does not hold up the others, a full host starts nothing until told, queue-wait limits expire on
// the loop's timer, and stop() hands back every queued job. Built under ASan+UBSan too.
#include <gtest/gtest.h>
#include <uv.h>

#include <set>
#include <string>
#include <vector>

#include "runner/admission_control.hpp"

namespace motor::runner {
namespace {

class FakeHost : public AdmissionHost {
 public:
  bool waits_on_workspace(const std::string& job_id) const override { return busy.count(job_id) > 0; }
  bool has_room_for(const QueueEntry&) const override { return room; }
  void start_admitted(const std::string& job_id, PendingStart pending) override {
    started.push_back(job_id);
    timeouts.push_back(pending.timeout_s);
  }
  void queue_wait_exceeded(const std::string& job_id) override { expired.push_back(job_id); }
  bool may_start_before_record(const PendingStart& pending) const override { return pending.cpus == kGated; }

  static constexpr int64_t kGated = 7;  // a job whose command waits at its gate (its cpus, in these tests)
  std::set<std::string> busy;
  bool room = true;
  std::vector<std::string> started, expired;
  std::vector<int64_t> timeouts;
};

class CoreAdmission : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(uv_loop_init(&loop_), 0); }
  void TearDown() override {
    admission_.reset();
    // The handles close through libuv: the loop must end with nothing left open.
    ASSERT_EQ(uv_run(&loop_, UV_RUN_DEFAULT), 0);
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle was left open";
  }
  Admission& admission() {
    if (!admission_) admission_ = std::make_unique<Admission>(&loop_, 8, host_);
    return *admission_;
  }
  size_t enqueue(const std::string& id, PriorityClass priority = PriorityClass::kBatch, uint64_t wait_ms = 60000,
                 bool gated = false) {
    QueueEntry e;
    e.job_id = id;
    e.priority = priority;
    e.enqueued_ms = uv_now(&loop_);
    e.deadline_ms = e.enqueued_ms + wait_ms;
    PendingStart p;
    p.timeout_s = static_cast<int64_t>(id.size());
    if (gated) p.cpus = FakeHost::kGated;
    return admission().enqueue(std::move(e), std::move(p));
  }
  void iterate() { uv_run(&loop_, UV_RUN_NOWAIT); }

  uv_loop_t loop_{};
  FakeHost host_;
  std::unique_ptr<Admission> admission_;
};

TEST_F(CoreAdmission, StartsOneJobPerLoopIterationInQueueOrder) {
  EXPECT_EQ(enqueue("a"), 1u);
  EXPECT_EQ(enqueue("bb"), 2u);
  EXPECT_EQ(enqueue("ccc", PriorityClass::kInteractive), 1u);  // interactive goes first
  for (const char* id : {"a", "bb", "ccc"}) admission().recorded(id);
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"ccc"}));
  iterate();
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"ccc", "a", "bb"}));
  EXPECT_EQ(host_.timeouts, std::vector<int64_t>({3, 1, 2}));  // each got its own PendingStart
  EXPECT_TRUE(admission().empty());
}

TEST_F(CoreAdmission, NothingStartsBeforeItsRecordIsDurable) {
  enqueue("a");
  admission().schedule();
  iterate();
  iterate();
  EXPECT_TRUE(host_.started.empty());
  admission().recorded("a");
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"a"}));
}

TEST_F(CoreAdmission, AJobWhoseCommandWaitsForItsRecordStartsBeforeIt) {
  enqueue("vm");
  enqueue("linux", PriorityClass::kBatch, 60000, true);
  admission().schedule();
  iterate();
  iterate();
  EXPECT_TRUE(host_.started.empty());  // FIFO: the first waits for its record, and nothing jumps it
  admission().recorded("vm");
  iterate();
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"vm", "linux"}));  // "linux" not yet recorded
}

TEST_F(CoreAdmission, AJobWaitingOnItsWorkspaceDoesNotHoldUpOthers) {
  enqueue("a");
  enqueue("b");
  host_.busy = {"a"};
  admission().recorded("a");
  admission().recorded("b");
  iterate();
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"b"}));
  host_.busy.clear();
  admission().schedule();  // the workspace went idle
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"b", "a"}));
}

TEST_F(CoreAdmission, AFullHostStartsNothingUntilToldToLookAgain) {
  host_.room = false;
  enqueue("a");
  admission().recorded("a");
  iterate();
  iterate();
  EXPECT_TRUE(host_.started.empty());
  host_.room = true;
  iterate();  // the starter stopped itself: nothing polls a full host
  EXPECT_TRUE(host_.started.empty());
  admission().schedule();  // a job finished
  iterate();
  EXPECT_EQ(host_.started, std::vector<std::string>({"a"}));
}

TEST_F(CoreAdmission, QueueWaitLimitsExpireOnTheLoopsTimer) {
  host_.room = false;
  enqueue("a", PriorityClass::kBatch, 1);
  enqueue("b", PriorityClass::kBatch, 600000);
  admission().recorded("a");
  admission().recorded("b");
  for (int i = 0; i < 40 && host_.expired.empty(); ++i) uv_run(&loop_, UV_RUN_ONCE);
  EXPECT_EQ(host_.expired, std::vector<std::string>({"a"}));
  EXPECT_EQ(admission().size(), 1u);
  EXPECT_EQ(admission().position("b"), 1u);
  admission().remove("b");
  admission().schedule();  // an empty queue stops the timer: the loop can end
}

TEST_F(CoreAdmission, StopHandsBackEveryQueuedJobAndStartsNoMore) {
  enqueue("a");
  enqueue("b", PriorityClass::kInteractive);
  admission().recorded("a");
  EXPECT_EQ(admission().stop(), std::vector<std::string>({"b", "a"}));
  enqueue("c");
  admission().recorded("c");
  iterate();
  EXPECT_TRUE(host_.started.empty());
  admission().remove("c");
  admission().schedule();
}

}  // namespace
}  // namespace motor::runner
