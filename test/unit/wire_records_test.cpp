// Replies and stream records (protocol/messages): encode, then parse back.
#include "protocol/messages.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "protocol/base64.hpp"
#include "protocol/json_writer.hpp"
#include "protocol/size.hpp"

namespace motor::protocol {
namespace {

using namespace std::string_literals;

constexpr const char* kJobId = "01890a5d-ac96-774b-bcce-b302099a8057";

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- replies and records: encode, then parse back ----

class RecordTest : public ::testing::Test {
 protected:
  Message parse(const std::string& json) {
    auto m = parse_message(parser_, json);
    EXPECT_TRUE(m.ok()) << json << ": " << (m.ok() ? "" : m.error().message);
    return m.ok() ? *m : Message{};
  }
  // The same frame read as plain JSON, for the fields Message does not carry.
  simdjson::dom::element json(const std::string& text) {
    simdjson::dom::element e;
    EXPECT_EQ(raw_parser_.parse(text).get(e), simdjson::SUCCESS) << text;
    return e;
  }
  int64_t int_field(const std::string& text, const char* key) {
    int64_t v = -1;
    EXPECT_EQ(json(text)[key].get_int64().get(v), simdjson::SUCCESS) << key << " in " << text;
    return v;
  }
  std::string string_field(const std::string& text, const char* key) {
    std::string_view v;
    EXPECT_EQ(json(text)[key].get_string().get(v), simdjson::SUCCESS) << key << " in " << text;
    return std::string(v);
  }
  bool is_null(const std::string& text, const char* key) {
    simdjson::dom::element e;
    if (json(text)[key].get(e) != simdjson::SUCCESS) return false;
    return e.is_null();
  }
  simdjson::dom::parser parser_, raw_parser_;
};

TEST_F(RecordTest, Accepted) {
  AcceptedRecord a;
  a.job_id = kJobId;
  a.queue_position = 3;
  a.env_not_forwarded = {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"};
  a.platform = Platform::kLinux;
  a.network = Network::kOffline;
  const std::string text = with_request_id(12, encode_accepted(a));
  const Message m = parse(text);
  EXPECT_EQ(m.kind, Message::Kind::kRecord);
  EXPECT_EQ(m.id, std::optional<int64_t>(12));
  EXPECT_EQ(m.type, "accepted");
  EXPECT_EQ(m.job_id, kJobId);
  EXPECT_EQ(m.seq, 0);  // accepted carries no seq
  EXPECT_EQ(m.raw, text);
  EXPECT_EQ(int_field(text, "queue_position"), 3);
  EXPECT_EQ(string_field(text, "platform"), "linux");
  EXPECT_EQ(text.find("\"network\""), std::string::npos) << text;  // offline: omitted (issue 17)
  simdjson::dom::array names;
  ASSERT_EQ(json(text)["env_not_forwarded"].get_array().get(names), simdjson::SUCCESS);
  std::vector<std::string> got;
  for (auto n : names) {
    std::string_view s;
    ASSERT_EQ(n.get_string().get(s), simdjson::SUCCESS);
    got.emplace_back(s);
  }
  EXPECT_EQ(got, a.env_not_forwarded);
  simdjson::dom::element secret;
  EXPECT_NE(json(text)["secret"].get(secret), simdjson::SUCCESS);  // only for direct jobs
}

TEST_F(RecordTest, AcceptedWithSecretAndEmptyEnvList) {
  AcceptedRecord a;
  a.job_id = kJobId;
  a.secret = "s3cr3t";
  const std::string text = encode_accepted(a);
  EXPECT_EQ(string_field(text, "secret"), "s3cr3t");
  simdjson::dom::array names;
  ASSERT_EQ(json(text)["env_not_forwarded"].get_array().get(names), simdjson::SUCCESS);
  EXPECT_EQ(names.size(), 0u);
  EXPECT_FALSE(parse(text).id.has_value());  // stored form: no request id
}

TEST_F(RecordTest, Started) {
  const std::string text = with_request_id(1, encode_started(1, 25, 1700000000123));
  EXPECT_EQ(text, R"({"id":1,"type":"started","seq":1,"queue_wait_ms":25,"started_at_ms":1700000000123})");
  const Message m = parse(text);
  EXPECT_EQ(m.type, "started");
  EXPECT_EQ(m.seq, 1);
  EXPECT_EQ(int_field(text, "queue_wait_ms"), 25);
  EXPECT_EQ(int_field(text, "started_at_ms"), 1700000000123);
}

TEST_F(RecordTest, OutputOfArbitraryBytes) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, split across two chunks below
  const std::vector<std::string> chunks = {all, euro.substr(0, 2), euro.substr(2), "\xff\xfe", "a", "ab", "abc",
                                           std::string(1, '\0'), std::string(70000, '\x80')};
  int64_t seq = 2;
  for (const auto& bytes : chunks) {
    for (const char* stream : {"stdout", "stderr"}) {
      const std::string text = with_request_id(5, encode_output(seq, stream, bytes));
      const Message m = parse(text);
      EXPECT_EQ(m.type, "output");
      EXPECT_EQ(m.seq, seq);
      EXPECT_EQ(m.stream, stream);
      EXPECT_EQ(m.bytes, bytes);
      EXPECT_EQ(string_field(text, "bytes"), base64_encode(bytes));
      simdjson::dom::element t;
      EXPECT_NE(json(text)["truncated_before_seq"].get(t), simdjson::SUCCESS);
      ++seq;
    }
  }
}

TEST_F(RecordTest, SplitUtf8ReassemblesAcrossRecords) {
  const std::string text = "h\xC3\xA9llo \xF0\x9F\x98\x80";  // héllo 😀
  std::string joined;
  for (size_t i = 0; i < text.size(); ++i) joined += parse(encode_output(static_cast<int64_t>(i) + 1, "stdout", text.substr(i, 1))).bytes;
  EXPECT_EQ(joined, text);
}

TEST_F(RecordTest, OutputWithTruncatedBeforeSeq) {
  const std::string text = encode_output(40, "stdout", "x", 17);
  EXPECT_EQ(int_field(text, "truncated_before_seq"), 17);
  EXPECT_EQ(parse(text).bytes, "x");
}

TEST_F(RecordTest, EmptyOutput) {
  const std::string text = encode_output(3, "stderr", "");
  EXPECT_EQ(string_field(text, "bytes"), "");
  const Message m = parse(text);
  EXPECT_EQ(m.stream, "stderr");
  EXPECT_EQ(m.bytes, "");
}

Outcome make_outcome(Outcome::Kind kind) {
  Outcome o;
  o.kind = kind;
  return o;
}

TEST_F(RecordTest, TerminalOfEveryOutcome) {
  std::vector<Outcome> outcomes;
  for (int code : {0, 1, 2, 127, 255}) {
    Outcome o = make_outcome(Outcome::Kind::kExit);
    o.code = code;
    outcomes.push_back(o);
  }
  for (int sig : {9, 15, 11}) {
    Outcome o = make_outcome(Outcome::Kind::kSignal);
    o.signal = sig;
    outcomes.push_back(o);
  }
  outcomes.push_back(make_outcome(Outcome::Kind::kCancelled));
  for (const char* reason : {"runner_full", "workspace_key_rejected", "runner_draining"}) {
    Outcome o = make_outcome(Outcome::Kind::kRefusedBeforeStart);
    o.reason = reason;
    outcomes.push_back(o);
  }
  outcomes.push_back(make_outcome(Outcome::Kind::kOutcomeUnknown));
  outcomes.push_back(make_outcome(Outcome::Kind::kHistoryExpired));

  for (const auto& o : outcomes) {
    TerminalRecord t;
    t.job_id = kJobId;
    t.seq = 9;
    t.outcome = o;
    t.wall_ms = 1234;
    t.queue_wait_ms = 5;
    t.ran = o.kind == Outcome::Kind::kRefusedBeforeStart ? Ran::kNone : Ran::kRemote;
    const std::string text = with_request_id(2, encode_terminal(t));
    const Message m = parse(text);
    EXPECT_EQ(m.type, "terminal");
    EXPECT_EQ(m.id, std::optional<int64_t>(2));
    EXPECT_EQ(m.job_id, kJobId);
    EXPECT_EQ(m.seq, 9);
    EXPECT_EQ(m.outcome.kind, o.kind) << text;
    EXPECT_EQ(m.outcome.code, o.code) << text;
    EXPECT_EQ(m.outcome.signal, o.signal) << text;
    EXPECT_EQ(m.outcome.reason, o.reason) << text;
    EXPECT_FALSE(m.killed.has_value());
    EXPECT_FALSE(m.refusal_detail.has_value());
  }
}

TEST_F(RecordTest, TerminalFields) {
  TerminalRecord t;
  t.job_id = kJobId;
  t.seq = 4;
  t.outcome = make_outcome(Outcome::Kind::kSignal);
  t.outcome.signal = 9;
  t.killed = KillReason::kDeadline;
  t.wall_ms = 60001;
  t.queue_wait_ms = 7;
  t.bundle_bytes = 0;
  t.ran = Ran::kRemote;
  t.oom_killed = true;
  t.platform = Platform::kLinux;
  t.network = Network::kOffline;
  const std::string text = encode_terminal(t);
  const Message m = parse(text);
  EXPECT_EQ(m.killed, std::optional<std::string>("deadline"));
  EXPECT_EQ(int_field(text, "wall_ms"), 60001);
  EXPECT_EQ(int_field(text, "queue_wait_ms"), 7);
  EXPECT_EQ(int_field(text, "bundle_bytes"), 0);
  EXPECT_EQ(string_field(text, "ran"), "remote");
  bool oom = false;
  ASSERT_EQ(json(text)["oom_killed"].get_bool().get(oom), simdjson::SUCCESS);
  EXPECT_TRUE(oom);
  EXPECT_EQ(string_field(text, "platform"), "linux");
  EXPECT_EQ(string_field(text, "network"), "offline");
  // Always sent, null when unavailable (exec-remote/v1).
  for (const char* key : {"tree_hash", "workspace_changes"}) EXPECT_TRUE(is_null(text, key)) << key << " in " << text;
  // Omitted when absent (issue 17): null would break a caller's decoder or mean something else.
  for (const char* key : {"untracked_files", "ignored_writes", "git_state_changed", "refusal_detail", "retry_after_ms",
                          "pipestatus"}) {
    EXPECT_EQ(text.find(std::string("\"") + key + "\""), std::string::npos) << key << " in " << text;
  }
}

TEST_F(RecordTest, TerminalKilledByCancel) {
  TerminalRecord t;
  t.job_id = kJobId;
  t.outcome = make_outcome(Outcome::Kind::kCancelled);
  t.killed = KillReason::kCancel;
  const Message m = parse(encode_terminal(t));
  EXPECT_EQ(m.killed, std::optional<std::string>("cancel"));
  EXPECT_EQ(m.outcome.kind, Outcome::Kind::kCancelled);
}

TEST_F(RecordTest, TerminalRefusal) {
  TerminalRecord t;
  t.job_id = kJobId;
  t.outcome = make_outcome(Outcome::Kind::kRefusedBeforeStart);
  t.outcome.reason = "runner_full";
  t.ran = Ran::kNone;
  t.refusal_detail = "8 jobs are running";
  t.retry_after_ms = 5000;
  const std::string text = encode_terminal(t);
  const Message m = parse(text);
  EXPECT_EQ(m.outcome.reason, "runner_full");
  EXPECT_EQ(m.refusal_detail, std::optional<std::string>("8 jobs are running"));
  EXPECT_EQ(int_field(text, "retry_after_ms"), 5000);
  EXPECT_EQ(string_field(text, "ran"), "none");
  EXPECT_EQ(text.find("\"killed\""), std::string::npos) << text;  // omitted when absent (issue 17)
}

TEST_F(RecordTest, HistoryExpiredHasNullRan) {
  TerminalRecord t;
  t.job_id = kJobId;
  t.outcome = make_outcome(Outcome::Kind::kHistoryExpired);
  const std::string text = encode_terminal(t);
  EXPECT_TRUE(is_null(text, "ran"));
  EXPECT_EQ(parse(text).outcome.kind, Outcome::Kind::kHistoryExpired);
}

TEST_F(RecordTest, UnknownOutcomeTypeIsOutcomeUnknown) {
  const Message m = parse(R"({"type":"terminal","job_id":"x","outcome":{"type":"teleported"}})");
  EXPECT_EQ(m.outcome.kind, Outcome::Kind::kOutcomeUnknown);
}

TEST_F(RecordTest, UnknownRecordTypeIsKeptWithItsSeq) {
  const Message m = parse(R"({"id":1,"type":"progress","seq":6,"percent":50})");
  EXPECT_EQ(m.kind, Message::Kind::kRecord);
  EXPECT_EQ(m.type, "progress");
  EXPECT_EQ(m.seq, 6);
}

TEST_F(RecordTest, ResultAndError) {
  const Message r = parse(encode_result(3, R"({"job_id":"x"})"));
  EXPECT_EQ(r.kind, Message::Kind::kResult);
  EXPECT_EQ(r.id, std::optional<int64_t>(3));
  EXPECT_EQ(r.raw, R"({"id":3,"result":{"job_id":"x"}})");

  const Message e = parse(encode_error(4, "bad_request", "field \"id\" must be a whole number"));
  EXPECT_EQ(e.kind, Message::Kind::kError);
  EXPECT_EQ(e.id, std::optional<int64_t>(4));
  EXPECT_EQ(e.error_code, "bad_request");
  EXPECT_EQ(e.error_message, "field \"id\" must be a whole number");

  const std::string no_id = encode_error(std::nullopt, "unauthorized", "no");
  EXPECT_TRUE(is_null(no_id, "id"));
  const Message n = parse(no_id);
  EXPECT_FALSE(n.id.has_value());
  EXPECT_EQ(n.error_code, "unauthorized");
}

TEST_F(RecordTest, ErrorMessageWithInvalidUtf8IsStillValidJson) {
  const std::string text = encode_error(1, "bad_request", "unknown method \"\xff\xfe\"");
  const Message e = parse(text);
  EXPECT_EQ(e.error_message, "unknown method \"\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST_F(RecordTest, WithRequestIdPrefixesTheId) {
  EXPECT_EQ(with_request_id(42, R"({"type":"x"})"), R"({"id":42,"type":"x"})");
  EXPECT_EQ(with_request_id(-1, R"({"a":1,"b":2})"), R"({"id":-1,"a":1,"b":2})");
}

TEST_F(RecordTest, MalformedMessages) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"[1]", "a message must be a JSON object"},
      {R"({"id":1})", "neither \"result\", \"error\" nor \"type\""},
      {R"({"id":1,"error":{"codA":"bad_request","message":"no"}})", "error reply without \"code\""},
      {R"({"id":1,"error":{"code":"","message":"no"}})", "error reply without \"code\""},
      {R"({"type":"output","seq":1,"bytes":"eA=="})", "output record without \"stream\""},
      {R"({"type":"output","seq":1,"stream":"stdout"})", "output record without \"bytes\""},
      {R"({"type":"output","seq":1,"stream":"stdout","bytes":"e"})", "\"bytes\" is not base64"},
      {R"({"type":"terminal","job_id":"x"})", "terminal record without \"outcome\""},
      {R"({"type":"terminal","outcome":"exit"})", "\"outcome\" must be an object"},
      {R"({"type":"terminal","outcome":{}})", "\"outcome.type\" is missing"},
      {R"({"type":"terminal","outcome":{"type":"exit"}})", "\"outcome.code\" is missing"},
      {R"({"type":"terminal","outcome":{"type":"signal","signal":"KILL"}})", "\"outcome.signal\" is missing"},
      {"{\"type\":\"\xc0\"}", "not valid UTF-8"},
  };
  for (const auto& c : cases) {
    auto m = parse_message(parser_, c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.error().code, "bad_request");
    EXPECT_TRUE(contains(m.error().message, c.message)) << c.text << " -> " << m.error().message;
  }
}

TEST(Refusal, TransientReasons) {
  for (const char* r : {"runner_draining", "runner_disk_full", "runner_full", "unreachable", "queue_wait_exceeded",
                        "transfer_interrupted"}) {
    EXPECT_TRUE(is_transient_refusal(r)) << r;
  }
  for (const char* r : {"runner_version_mismatch", "snapshot_failed", "workspace_key_rejected", "tree_hash_mismatch",
                        "bundle_rejected", "workspace_setup_failed", "network_unsupported", "platform_unsupported", ""}) {
    EXPECT_FALSE(is_transient_refusal(r)) << r;
  }
}

}  // namespace
}  // namespace motor::protocol
