// Issue 17, Motor's own client (it meets other runners too): a refusal is lasting unless it
// carries retry_after_ms; what exec-remote/v1 tells a caller to do with tags it does not know
// (an outcome, a kill, an output stream, a record type, a prepare outcome); and the frames
// `motor exec-remote` writes itself, in the vocabulary's canonical shapes.
#include <simdjson.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "client/caller_frames.hpp"
#include "client/exit_codes.hpp"
#include "client/prepare_reply.hpp"
#include "client/stream_follow.hpp"
#include "protocol/messages.hpp"

namespace motor::client {
namespace {

protocol::Message decoded(const std::string& json) {
  simdjson::dom::parser parser;
  auto m = protocol::parse_message(parser, json);
  EXPECT_TRUE(m.ok()) << json << ": " << (m.ok() ? "" : m.error().message);
  return m.ok() ? *m : protocol::Message{};
}

bool contains(const std::string& haystack, std::string_view needle) { return haystack.find(needle) != std::string::npos; }

TEST(ClientRecords, APrepareRefusalWithoutARetryKeyIsLasting) {
  simdjson::dom::parser parser;
  auto lasting = read_prepare_outcome(
      parser, R"({"id":3,"result":{"transfer_id":"0192a64a-1234-7000-8000-000000000002","outcome":{"type":"refused_before_start","reason":"workspace_key_rejected"}}})");
  ASSERT_TRUE(lasting);
  EXPECT_FALSE(lasting->prepared);
  EXPECT_FALSE(lasting->transient) << "no retry_after_ms key: a lasting refusal (exit 69)";
  auto nulled = read_prepare_outcome(
      parser, R"({"id":3,"result":{"outcome":{"type":"refused_before_start","reason":"x"},"retry_after_ms":null}})");
  ASSERT_TRUE(nulled);
  EXPECT_FALSE(nulled->transient);
  auto transient = read_prepare_outcome(
      parser, R"({"id":3,"result":{"outcome":{"type":"refused_before_start","reason":"runner_draining"},"retry_after_ms":30000}})");
  ASSERT_TRUE(transient);
  EXPECT_TRUE(transient->transient);
}

TEST(ClientRecords, AnUnknownPrepareOutcomeIsNamedAndNeverPrepared) {
  simdjson::dom::parser parser;
  auto o = read_prepare_outcome(
      parser, R"({"id":3,"result":{"outcome":{"type":"future_prepare"},"transfer_id":"0192a64a-1234-7000-8000-000000000002"}})");
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->prepared);
  EXPECT_EQ(o->unknown_type, "future_prepare");
  EXPECT_TRUE(contains(o->reason, "future_prepare")) << "the reason printed must name it, not be empty: " << o->reason;
  EXPECT_FALSE(read_prepare_outcome(parser, R"({"id":3,"result":{"transfer_id":"t","outcome":null,"have":[]}})"));
}

TEST(ClientRecords, AnUnknownOutcomeIsGradedUnknownAndNamed) {
  const auto m = decoded(R"({"id":1,"type":"terminal","job_id":"j1","outcome":{"type":"future_outcome"},"ran":"remote"})");
  EXPECT_EQ(m.outcome.kind, protocol::Outcome::Kind::kOutcomeUnknown);
  EXPECT_EQ(exit_code_for(m.outcome, m.killed, m.retry_after_ms), kExitDropped) << "never as a refusal: it may have run";
  EXPECT_TRUE(contains(describe_terminal(m), "future_outcome")) << describe_terminal(m);
  const auto lost = decoded(R"({"id":1,"type":"terminal","job_id":"j1","outcome":{"type":"outcome_unknown"}})");
  EXPECT_TRUE(contains(describe_terminal(lost), "while the runner was down")) << describe_terminal(lost);
}

TEST(ClientRecords, AnUnknownRefusalReasonStillMeansNotStarted) {
  const auto m = decoded(R"({"id":1,"type":"terminal","job_id":"j","outcome":{"type":"refused_before_start","reason":"future_refusal"}})");
  EXPECT_EQ(m.outcome.kind, protocol::Outcome::Kind::kRefusedBeforeStart);
  EXPECT_EQ(exit_code_for(m.outcome, m.killed, m.retry_after_ms), kExitUnavailable);
  EXPECT_TRUE(contains(describe_terminal(m), "future_refusal"));
  EXPECT_FALSE(contains(describe_terminal(m), "try again")) << describe_terminal(m);
  const auto hinted = decoded(
      R"({"id":1,"type":"terminal","job_id":"j","outcome":{"type":"refused_before_start","reason":"runner_full"},"retry_after_ms":5000})");
  EXPECT_TRUE(contains(describe_terminal(hinted), "try again later")) << describe_terminal(hinted);
}

TEST(ClientRecords, AnUnknownKillIsReportedAndTheOutcomeDecides) {
  const auto m = decoded(R"({"id":1,"type":"terminal","job_id":"j","outcome":{"type":"signal","signal":9},"killed":"future_kill"})");
  EXPECT_EQ(exit_code_for(m.outcome, m.killed, m.retry_after_ms), 128 + 9);
  EXPECT_TRUE(contains(describe_terminal(m), "future_kill")) << describe_terminal(m);
}

TEST(ClientRecords, AnUnknownOutputStreamIsDeliveredButNotToStdout) {
  const auto m = decoded(R"({"id":1,"type":"output","seq":4,"stream":"future_stream","bytes":"aGk="})");
  EXPECT_EQ(m.seq, 4);
  EXPECT_EQ(m.bytes, "hi");
  EXPECT_EQ(output_fd_for(m.stream), STDERR_FILENO);
  EXPECT_EQ(output_fd_for("stdout"), STDOUT_FILENO);
  EXPECT_EQ(output_fd_for("stderr"), STDERR_FILENO);
}

TEST(ClientRecords, AnUnknownRecordKeepsItsSeqAndIsNotTerminal) {
  const auto m = decoded(R"({"id":1,"type":"future_record","seq":7})");
  EXPECT_EQ(m.kind, protocol::Message::Kind::kRecord);
  EXPECT_EQ(m.type, "future_record");
  EXPECT_EQ(m.seq, 7);
}

TEST(ClientRecords, TheEndpointRewritesOnlyTheId) {
  auto r = with_caller_id(R"({"id":12,"type":"output","seq":2,"stream":"stdout","bytes":"eA==","z":[1,{"a":null}]})", 7);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, R"({"id":7,"type":"output","seq":2,"stream":"stdout","bytes":"eA==","z":[1,{"a":null}]})");
  EXPECT_FALSE(with_caller_id("[1]", 7).ok());
}

TEST(ClientRecords, TheEndpointsOwnRefusalsAreCanonical) {
  LocalRefusal unreachable;
  unreachable.reason = "unreachable";
  unreachable.bundle_bytes = 29;
  unreachable.tree_hash = "3333333333333333333333333333333333333333";
  // The vocabulary's outcomes/unreachable.jcs stream record, with the caller's id in key order.
  EXPECT_EQ(refusal_terminal(5, "0192a64a-1234-7000-8000-000000000001", unreachable),
            R"({"bundle_bytes":29,"id":5,"job_id":"0192a64a-1234-7000-8000-000000000001","outcome":{"reason":"unreachable",)"
            R"("type":"refused_before_start"},"queue_wait_ms":0,"ran":"none","tree_hash":"3333333333333333333333333333333333333333",)"
            R"("type":"terminal","wall_ms":0,"workspace_changes":null})");
  // replies/prepare-snapshot_failed.jcs, as a reply to request 2.
  LocalRefusal snapshot_failed;
  snapshot_failed.reason = "snapshot_failed";
  EXPECT_EQ(refusal_prepare_reply(2, "0192a64a-1234-7000-8000-000000000002", snapshot_failed),
            R"({"id":2,"result":{"outcome":{"reason":"snapshot_failed","type":"refused_before_start"},)"
            R"("transfer_id":"0192a64a-1234-7000-8000-000000000002"}})");
  // replies/status-unreachable.jcs.
  EXPECT_EQ(unreachable_status_reply(9),
            R"({"id":9,"result":{"queue_depth":0,"repositories":[],"running_jobs":[],"rustc_version":"","server_reachable":false}})");
  LocalRefusal hinted;
  hinted.reason = "transfer_interrupted";
  hinted.detail = std::string(2000, 'x');
  hinted.retry_after_ms = 5000;
  const std::string t = refusal_terminal(1, "j", hinted);
  EXPECT_TRUE(contains(t, R"("ran":"none","refusal_detail":")" + std::string(1024, 'x') + R"(","retry_after_ms":5000,"tree_hash":null)")) << t;
}

// The endpoint passes the runner's frames on with the caller's id: a frame whose "id" comes
// first (as the runner writes them) is spliced, not parsed again; any other is re-encoded.
TEST(ClientRecords, ARelayedFrameGetsTheCallersIdWithEverythingElseKept) {
  EXPECT_EQ(*with_caller_id(R"({"id":12,"type":"output","seq":3})", 5), R"({"id":5,"type":"output","seq":3})");
  EXPECT_EQ(*with_caller_id(R"({"id":-4,"result":{}})", 5), R"({"id":5,"result":{}})");
  EXPECT_EQ(*with_caller_id(R"({"id":null,"error":{"code":"x","message":"y"}})", 5),
            R"({"id":5,"error":{"code":"x","message":"y"}})");
  EXPECT_EQ(*with_caller_id(R"({"id":7})", 5), R"({"id":5})");
  // Not in the runner's order: parsed, "id" replaced where it stands.
  EXPECT_EQ(*with_caller_id(R"({"type":"terminal", "id":12,"seq":9})", 5), R"({"type":"terminal","id":5,"seq":9})");
  EXPECT_EQ(*with_caller_id(R"({"id":"12","x":1})", 5), R"({"id":5,"x":1})");
  EXPECT_FALSE(with_caller_id("[1]", 5));
}

}  // namespace
}  // namespace motor::client
