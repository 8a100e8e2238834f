// Issue 17 through a real runner: what it sends is what exec-remote/v1 callers decode. Each test
// is one difference the issue names (its number in the comment), checked against the
// vocabulary's shapes (test/conformance/fixtures) with Motor's (ext) fields left aside.
#include <gtest/gtest.h>

#include <thread>

#include "conformance/vocabulary.hpp"
#include "conformance/wire_test_support.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;
using namespace vocabulary;

constexpr const char* kUnknownJob = "0190f3a2-5b6c-7d8e-9f01-0000000000ff";

std::string frame_of(const std::vector<std::string>& frames, const std::string& type) {
  for (const auto& f : frames) {
    if (json_field(f, "/type") == type) return f;
  }
  return "<no " + type + ">";
}

class RunnerWire : public ::testing::Test {
 protected:
  void SetUp() override { MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root"); }
  void start(const std::string& config = "") {
    runner_ = std::make_unique<RunnerProcess>(config);
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  // A job that stays running until cancelled; returns its id (its `started` has arrived).
  std::string start_sleeper(RawClient& c, int64_t id = 1) {
    EXPECT_TRUE(c.send_frame(fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"sleep 600"}}}})", id)));
    std::string job_id;
    for (std::optional<std::string> f; (f = c.read_frame(30000ms));) {
      if (json_field(*f, "/type") == "accepted") job_id = json_field(*f, "/job_id");
      if (json_field(*f, "/type") == "started") break;
    }
    return job_id;
  }
  std::unique_ptr<RunnerProcess> runner_;
};

// 3: a network or platform string the runner does not know is refused before start, naming it.
TEST_F(RunnerWire, UnknownNetworkAndPlatformAreRefusedBeforeStartWithTheirWireName) {
  start();
  for (const auto& [field, reason] : {std::pair<std::string, std::string>{"network", "network_unsupported"},
                                      {"platform", "platform_unsupported"}}) {
    auto frames = run_stream(*runner_, fmt::format(R"({{"command":"true","{}":"future_value"}})", field));
    const std::string terminal = last_frame(frames);
    EXPECT_EQ(json_field(terminal, "/outcome/reason"), reason) << terminal;
    EXPECT_EQ(json_field(terminal, "/refusal_detail"), "future_value") << terminal;
    EXPECT_EQ(shape_difference(terminal, fixture("records", "terminal-refused-" + reason), kTerminalFields), "") << terminal;
  }
}

// 4 and 11: exec.status has a string rustc_version and a repositories list; an offline job's
// accepted has no network, and its terminal none of the fields the vocabulary omits when absent.
TEST_F(RunnerWire, StatusAcceptedAndTerminalHaveTheVocabularyShapes) {
  start();
  RawClient c(runner_->socket());
  const std::string status = call_method(c, 1, "exec.status", "{}");
  EXPECT_EQ(shape_difference(json_field(status, "/result"), fixture("replies", "status"), kStatusReplyFields), "") << status;
  // Asked once at start by a child on the runner's PATH: "" until it answers or without a rustc
  // (a host with rustup's cargo on PATH, as CI's, answers within the first status).
  const std::string rustc = json_field(status, "/result/rustc_version");
  EXPECT_TRUE(rustc.empty() || rustc.rfind("rustc ", 0) == 0) << rustc;
  auto frames = run_stream(*runner_, R"({"command":"true"})");
  const std::string accepted = frame_of(frames, "accepted");
  EXPECT_EQ(shape_difference(accepted, fixture("records", "accepted"), kAcceptedFields), "") << accepted;
  const std::string terminal = last_frame(frames);
  EXPECT_EQ(shape_difference(terminal, fixture("records", "terminal-exit"), kTerminalFields), "") << terminal;
}

// 6: an unknown id is acknowledged (a tombstone); with a secret, the direct-job refusal stands.
TEST_F(RunnerWire, CancelOfAnUnknownIdIsAcknowledgedButAWrongSecretIsNot) {
  start();
  RawClient c(runner_->socket());
  const std::string reply = call_method(c, 1, "exec.cancel", fmt::format(R"({{"job_id":"{}"}})", kUnknownJob));
  EXPECT_EQ(json_field(reply, "/result"), canonical(fixture("replies", "cancel")).replace(11, 36, kUnknownJob)) << reply;
  const std::string with_secret =
      call_method(c, 2, "exec.cancel", fmt::format(R"({{"job_id":"{}","secret":"not-it"}})", kUnknownJob));
  EXPECT_EQ(json_field(with_secret, "/error/code"), "unauthorized") << with_secret;
  EXPECT_EQ(json_field(with_secret, "/error/message"), "no such job, or it is not yours") << with_secret;
  // A job of this caller is cancelled and acknowledged the same way.
  RawClient running(runner_->socket());
  const std::string job = start_sleeper(running, 3);
  EXPECT_EQ(json_field(call_method(c, 4, "exec.cancel", fmt::format(R"({{"job_id":"{}"}})", job)), "/result/job_id"), job);
  EXPECT_EQ(json_field(last_frame(read_until_terminal(running)), "/killed"), "cancel");
}

// 8: cancelled while running: the kill's signal with killed "cancel"; before it started: cancelled.
TEST_F(RunnerWire, CancelWhileRunningIsTheSignalAndBeforeStartIsCancelled) {
  start("max_running_jobs = 1\ncpu_oversubscription = 8\n");
  RawClient running(runner_->socket()), queued(runner_->socket()), control(runner_->socket());
  const std::string running_id = start_sleeper(running);
  ASSERT_FALSE(running_id.empty()) << runner_->log();
  ASSERT_TRUE(queued.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true"}})"));
  auto accepted = queued.read_frame();
  ASSERT_TRUE(accepted);
  const std::string queued_id = json_field(*accepted, "/job_id");
  call_method(control, 1, "exec.cancel", fmt::format(R"({{"job_id":"{}"}})", queued_id));
  const std::string before = last_frame(read_until_terminal(queued));
  EXPECT_EQ(json_field(before, "/outcome/type"), "cancelled") << before;
  EXPECT_EQ(json_field(before, "/ran"), "none") << before;
  EXPECT_EQ(shape_difference(before, fixture("records", "terminal-cancelled"), kTerminalFields), "") << before;
  call_method(control, 2, "exec.cancel", fmt::format(R"({{"job_id":"{}"}})", running_id));
  const std::string killed = last_frame(read_until_terminal(running));
  EXPECT_EQ(json_field(killed, "/outcome"), R"({"type":"signal","signal":9})") << killed;
  EXPECT_EQ(json_field(killed, "/killed"), "cancel") << killed;
  EXPECT_EQ(shape_difference(killed, fixture("records", "terminal-killed-cancel"), kTerminalFields), "") << killed;
  // Motor's own client keeps its documented exit status for a cancel.
  RawClient again(runner_->socket());
  const std::string third = start_sleeper(again);
  std::thread canceller([&] { runner_->client({"cancel", third}); });
  auto attach = runner_->client({"attach", third});
  canceller.join();
  EXPECT_EQ(attach.exit_code, 130) << attach.out << attach.err;
}

// 9: a job queued when the runner died is outcome_unknown after the restart, not cancelled.
TEST_F(RunnerWire, AJobQueuedWhenTheRunnerDiedIsOutcomeUnknown) {
  start("max_running_jobs = 1\ncpu_oversubscription = 8\n");
  RawClient running(runner_->socket()), queued(runner_->socket());
  ASSERT_FALSE(start_sleeper(running).empty()) << runner_->log();
  ASSERT_TRUE(queued.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true"}})"));
  auto accepted = queued.read_frame();
  ASSERT_TRUE(accepted);
  const std::string queued_id = json_field(*accepted, "/job_id");
  const std::string terminal = terminal_after_a_crash(*runner_, queued_id);
  EXPECT_EQ(json_field(terminal, "/outcome/type"), "outcome_unknown") << terminal;
  EXPECT_EQ(json_field(terminal, "/ran"), "none") << terminal;
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), "null") << terminal;
  EXPECT_EQ(terminal.find("\"refusal_detail\""), std::string::npos) << terminal;  // not a refusal
}

}  // namespace
}  // namespace motor::test
