// Issue 17: every record, reply and request shape of exec-remote/v1, as the caller-side types
// (cortexkit-exec-remote-types 0.2.x) declare them. Records: a value made of each fixture is
// encoded by the runner's own encoder and must be the fixture exactly (its vocabulary fields,
// canonically: every non-nullable field present, every omit-when-absent field absent), with
// Motor's (ext) fields left aside. Requests: each fixture decodes. The client's decoder grades
// every record, including the unknown tags a newer runner may send.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "conformance/vocabulary.hpp"
#include "protocol/base64.hpp"
#include "protocol/messages.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::test {
namespace {

using namespace vocabulary;
using protocol::Outcome;

simdjson::dom::element parsed(simdjson::dom::parser& parser, const std::string& text) {
  simdjson::dom::element e;
  EXPECT_EQ(parser.parse(text).get(e), simdjson::SUCCESS) << text;
  return e;
}

std::optional<std::string> string_at(simdjson::dom::element e, const char* key) {
  std::string_view s;
  if (e[key].get_string().get(s)) return std::nullopt;
  return std::string(s);
}

int64_t int_at(simdjson::dom::element e, const char* key) {
  int64_t v = 0;
  if (e[key].get_int64().get(v)) return 0;
  return v;
}

std::string raw_at(simdjson::dom::element e, const char* key) {
  simdjson::dom::element v;
  return e[key].get(v) ? "null" : simdjson::minify(v);
}

// The runner's TerminalRecord holding what the fixture says.
protocol::TerminalRecord terminal_of(const std::string& text) {
  simdjson::dom::parser parser;
  auto e = parsed(parser, text);
  protocol::TerminalRecord t;
  t.job_id = *string_at(e, "job_id");
  simdjson::dom::element outcome;
  EXPECT_EQ(e["outcome"].get(outcome), simdjson::SUCCESS) << text;
  t.outcome = *protocol::parse_outcome(outcome);
  if (auto k = string_at(e, "killed")) t.killed = protocol::parse_kill_reason(*k);
  simdjson::dom::array statuses;
  if (!e["pipestatus"].get_array().get(statuses)) {
    t.pipestatus.emplace();
    for (auto s : statuses) {
      int64_t status = 0;
      if (!s.get_int64().get(status)) t.pipestatus->push_back(static_cast<int>(status));
    }
  }
  t.wall_ms = int_at(e, "wall_ms");
  t.queue_wait_ms = int_at(e, "queue_wait_ms");
  t.bundle_bytes = int_at(e, "bundle_bytes");
  if (auto ran = string_at(e, "ran")) t.ran = *ran == "none" ? protocol::Ran::kNone : protocol::Ran::kRemote;
  t.tree_hash = string_at(e, "tree_hash");
  t.refusal_detail = string_at(e, "refusal_detail");
  if (int64_t retry = int_at(e, "retry_after_ms"); retry > 0) t.retry_after_ms = retry;
  if (raw_at(e, "workspace_changes") != "null") {
    t.workspace = protocol::WorkspaceReportJson{raw_at(e, "workspace_changes"), raw_at(e, "untracked_files"),
                                                raw_at(e, "ignored_writes"), raw_at(e, "git_state_changed")};
  }
  return t;
}

TEST(WireShapes, EveryTerminalRecordEncodesCanonically) {
  int cases = 0;
  for (const auto& name : fixture_names("records")) {
    if (!name.starts_with("terminal-") || name.starts_with("terminal-unknown-")) continue;
    const std::string expected = fixture("records", name);
    const std::string encoded = protocol::encode_terminal(terminal_of(expected));
    EXPECT_EQ(canonical(encoded, kTerminalFields), canonical(expected)) << name << "\nencoded: " << encoded;
    ++cases;
  }
  // Each outcome, each refusal reason (14) and one with a retry hint, both kills, pipeline
  // statuses, a lost running and a lost queued job, and the reports.
  EXPECT_EQ(cases, 26);
}

TEST(WireShapes, TerminalFieldsTheVocabularyOmitsAreOmitted) {
  protocol::TerminalRecord t = terminal_of(fixture("records", "terminal-exit"));
  const std::string encoded = protocol::encode_terminal(t);
  for (const char* key : {"killed", "pipestatus", "refusal_detail", "retry_after_ms", "git_state_changed",
                          "untracked_files", "ignored_writes"}) {
    EXPECT_EQ(encoded.find(fmt::format("\"{}\"", key)), std::string::npos) << key << " in " << encoded;
  }
  // ...and those it always sends are sent, null included.
  for (const char* key : {"ran", "tree_hash", "workspace_changes", "wall_ms", "queue_wait_ms", "bundle_bytes"}) {
    EXPECT_NE(encoded.find(fmt::format("\"{}\":", key)), std::string::npos) << key << " in " << encoded;
  }
}

TEST(WireShapes, AcceptedStartedAndOutputEncodeCanonically) {
  for (const auto& name : {"accepted", "accepted-outbound"}) {
    const std::string expected = fixture("records", name);
    simdjson::dom::parser parser;
    auto e = parsed(parser, expected);
    protocol::AcceptedRecord a;
    a.job_id = *string_at(e, "job_id");
    a.queue_position = int_at(e, "queue_position");
    simdjson::dom::array names;
    ASSERT_EQ(e["env_not_forwarded"].get_array().get(names), simdjson::SUCCESS) << name;
    for (auto n : names) {
      std::string_view s;
      if (!n.get_string().get(s)) a.env_not_forwarded.emplace_back(s);
    }
    if (string_at(e, "network") == std::optional<std::string>("outbound")) a.network = protocol::Network::kOutbound;
    EXPECT_EQ(canonical(protocol::encode_accepted(a), kAcceptedFields), canonical(expected)) << name;
  }
  {
    const std::string expected = fixture("records", "started");
    simdjson::dom::parser parser;
    auto e = parsed(parser, expected);
    const std::string encoded = protocol::encode_started(int_at(e, "seq"), int_at(e, "queue_wait_ms"), int_at(e, "started_at_ms"));
    EXPECT_EQ(canonical(encoded, kStartedFields), canonical(expected));
  }
  for (const auto& name : {"output", "output-truncated"}) {
    const std::string expected = fixture("records", name);
    simdjson::dom::parser parser;
    auto e = parsed(parser, expected);
    std::optional<int64_t> truncated;
    if (int64_t v = int_at(e, "truncated_before_seq"); v > 0) truncated = v;
    const std::string encoded = protocol::encode_output(int_at(e, "seq"), *string_at(e, "stream"),
                                                        *protocol::base64_decode(*string_at(e, "bytes")), truncated);
    EXPECT_EQ(canonical(encoded, kOutputFields), canonical(expected)) << name;
  }
}

// What a caller (Motor's own client among them) makes of every record, known and unknown.
TEST(WireShapes, TheClientDecoderGradesEveryRecord) {
  simdjson::dom::parser parser;
  for (const auto& name : fixture_names("records")) {
    if (name == "unknown-output-stream") continue;  // the client's catch-all (issue 17's client side)
    auto m = protocol::parse_message(parser, fixture("records", name));
    ASSERT_TRUE(m) << name << ": " << m.error().message;
    EXPECT_EQ(m->kind, protocol::Message::Kind::kRecord) << name;
  }
  auto unknown_record = protocol::parse_message(parser, fixture("records", "unknown-record"));
  EXPECT_EQ(unknown_record->type, "progress_bar");  // skipped by type, never terminal
  EXPECT_EQ(unknown_record->seq, 3);                // its seq still counts toward the resume cursor
  auto unknown_outcome = protocol::parse_message(parser, fixture("records", "terminal-unknown-outcome"));
  EXPECT_EQ(unknown_outcome->outcome.kind, Outcome::Kind::kOutcomeUnknown);  // never "did not run"
  auto unknown_refusal = protocol::parse_message(parser, fixture("records", "terminal-unknown-refusal"));
  EXPECT_EQ(unknown_refusal->outcome.kind, Outcome::Kind::kRefusedBeforeStart);  // still did not start
  EXPECT_EQ(unknown_refusal->outcome.reason, "moon_phase");
  auto unknown_killed = protocol::parse_message(parser, fixture("records", "terminal-unknown-killed"));
  EXPECT_EQ(unknown_killed->killed, std::optional<std::string>("oom_reaper"));
  auto killed_cancel = protocol::parse_message(parser, fixture("records", "terminal-killed-cancel"));
  EXPECT_EQ(killed_cancel->outcome.kind, Outcome::Kind::kSignal);
  EXPECT_EQ(killed_cancel->outcome.signal, 9);
  EXPECT_EQ(killed_cancel->killed, std::optional<std::string>("cancel"));
}

TEST(WireShapes, EveryRunRequestDecodes) {
  simdjson::dom::parser parser;
  for (const auto& name : fixture_names("requests")) {
    if (!name.starts_with("run-")) continue;
    auto p = protocol::parse_run_params(parser, fixture("requests", name), 1 << 20);
    ASSERT_TRUE(p) << name << ": " << p.error().message;
    EXPECT_TRUE(workspace::validate_workspace_key(p->workspace_key)) << name;
    for (const auto& s : p->siblings) EXPECT_TRUE(workspace::validate_workspace_key(s)) << name << ": " << s;
    // The cwd is inside the workspace the key names (not inside repository_root).
    auto rel = workspace::relative_cwd(workspace::cwd_checkout(p->workspace_key, p->repository_root), p->cwd);
    EXPECT_TRUE(rel) << name << ": " << (rel ? "" : rel.error().message);
  }
  auto full = protocol::parse_run_params(parser, fixture("requests", "run-full"), 1 << 20);
  EXPECT_EQ(full->network, protocol::Network::kOutbound);
  EXPECT_EQ(full->timeout_s, std::optional<int64_t>(120));
  EXPECT_EQ(full->queue_wait_limit_s, std::optional<int64_t>(0));  // an explicit zero
  EXPECT_EQ(full->weight_hint, std::optional<double>(4));
  auto network = protocol::parse_run_params(parser, fixture("requests", "run-unknown-network"), 1 << 20);
  EXPECT_EQ(network->unknown_network, std::optional<std::string>("mesh_only"));
  auto platform = protocol::parse_run_params(parser, fixture("requests", "run-unknown-platform"), 1 << 20);
  EXPECT_EQ(platform->unknown_platform, std::optional<std::string>("plan9"));
}

TEST(WireShapes, PrepareAttachCancelDropAndStatusRequestsDecode) {
  simdjson::dom::parser parser;
  auto prepare = protocol::parse_workspace_params(parser, fixture("requests", "prepare"));
  ASSERT_TRUE(prepare) << prepare.error().message;
  EXPECT_EQ(prepare->base_commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_TRUE(prepare->tree_hash.empty());
  EXPECT_TRUE(workspace::validate_workspace_key(prepare->workspace_key));
  auto drop = protocol::parse_workspace_params(parser, fixture("requests", "drop"));
  ASSERT_TRUE(drop);
  EXPECT_TRUE(workspace::validate_workspace_key(drop->workspace_key));
  auto attach = protocol::parse_job_ref(parser, fixture("requests", "attach"), true);
  ASSERT_TRUE(attach) << attach.error().message;
  EXPECT_EQ(attach->from_seq, 5);
  EXPECT_TRUE(protocol::parse_job_ref(parser, fixture("requests", "cancel"), true));
  EXPECT_TRUE(protocol::parse_job_ref(parser, fixture("requests", "status"), false));
}

TEST(WireShapes, TheFixturesThemselvesAreCanonicalJson) {
  for (const char* kind : {"requests", "records", "replies"}) {
    for (const auto& name : fixture_names(kind)) {
      EXPECT_NE(canonical(fixture(kind, name)), "<invalid json>") << kind << "/" << name;
    }
  }
}

}  // namespace
}  // namespace motor::test
