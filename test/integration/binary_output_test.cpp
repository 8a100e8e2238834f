// Binary output frames (ext, docs/protocol.md "Binary output frames"): a session that asked for
// them in runner.hello gets a job's output as raw bytes after a small JSON header; every other
// session (an exec-remote/v1 caller never asks) gets the JSON records with base64, and both get
// the same bytes under the same seqs, live and replayed from the log.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include <simdjson.h>

#include "protocol/base64.hpp"
#include "protocol/output_frame.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

// Every byte value, NUL and quote and backslash included, 2 MiB and an odd tail.
constexpr const char* kWriter =
    "python3 -c 'import sys\n"
    "n = (2 << 20) + 12345\n"
    "sys.stdout.buffer.write(bytes(((i * 11 + i // 256) & 255) for i in range(n)))'";

std::string expected_bytes() {
  std::string out;
  const size_t n = (size_t{2} << 20) + 12345;
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((i * 11 + i / 256) & 0xff));
  return out;
}

struct Stream {
  std::map<int64_t, std::string> output;  // seq -> bytes
  int binary_frames = 0, json_output_frames = 0;
  bool terminal = false;
};

// Reads the stream of `request_id` to its terminal record: each output record's bytes by seq.
Stream read_stream(RawClient& c, int64_t request_id) {
  Stream s;
  simdjson::dom::parser parser;
  while (auto frame = c.read_frame(std::chrono::seconds(60))) {
    std::string_view header = *frame, raw;
    const bool binary = !frame->empty() && (*frame)[0] == protocol::kBinaryFrameMark;
    if (binary) {
      auto parts = protocol::split_binary_frame(*frame);
      EXPECT_TRUE(parts) << "a binary frame that does not split";
      if (!parts) break;
      header = parts->first;
      raw = parts->second;
    }
    simdjson::dom::element e;
    if (parser.parse(header.data(), header.size()).get(e)) {
      ADD_FAILURE() << "a frame that is neither JSON nor binary";
      break;
    }
    int64_t id = -1, seq = 0;
    std::string_view type;
    if (e["id"].get_int64().get(id) || e["type"].get_string().get(type)) continue;  // not a record
    if (e["seq"].get_int64().get(seq)) seq = 0;
    if (id != request_id) continue;
    if (type == "terminal") {
      s.terminal = true;
      break;
    }
    if (type != "output") continue;
    if (binary) {
      ++s.binary_frames;
      s.output[seq] = std::string(raw);
      continue;
    }
    ++s.json_output_frames;
    std::string_view b64;
    EXPECT_FALSE(e["bytes"].get_string().get(b64)) << "a JSON output record without bytes";
    auto bytes = protocol::base64_decode(b64);
    EXPECT_TRUE(bytes) << "bytes that are not base64";
    if (bytes) s.output[seq] = *bytes;
  }
  return s;
}

std::string joined(const Stream& s) {
  std::string all;
  for (const auto& [seq, bytes] : s.output) all += bytes;
  return all;
}

std::vector<int64_t> seqs(const Stream& s) {
  std::vector<int64_t> out;
  for (const auto& [seq, bytes] : s.output) out.push_back(seq);
  return out;
}

TEST(BinaryOutputFrames, OnlyASessionThatAskedGetsThemAndBothGetTheSameBytes) {
  MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
  RunnerProcess runner;
  ASSERT_TRUE(runner.start()) << runner.log();
  const std::string want = expected_bytes();

  RawClient asked(runner.socket());
  const std::string granted = call_method(asked, 1, "runner.hello", R"({"binary_output":true})");
  EXPECT_EQ(json_field(granted, "/result/binary_output"), "true") << granted;
  ASSERT_TRUE(asked.send_frame(R"({"id":2,"method":"exec.run","params":{"command":)" + json_quote(kWriter) + "}}"));
  const auto accepted = asked.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  ASSERT_EQ(job.size(), 36u) << *accepted;
  const Stream live = read_stream(asked, 2);
  ASSERT_TRUE(live.terminal) << runner.log();
  EXPECT_EQ(live.json_output_frames, 0) << "a session that asked got JSON output records";
  EXPECT_GT(live.binary_frames, 1);
  EXPECT_TRUE(joined(live) == want) << "the binary frames' bytes differ (" << joined(live).size() << " bytes)";

  // A session that never asked (what every exec-remote/v1 caller is), and one that said false.
  for (const char* hello : {"", R"({"binary_output":false})"}) {
    RawClient plain(runner.socket());
    if (*hello) {
      EXPECT_EQ(json_field(call_method(plain, 1, "runner.hello", hello), "/result/binary_output"), "false");
    }
    ASSERT_TRUE(plain.send_frame(R"({"id":3,"method":"exec.attach","params":{"job_id":")" + job + R"(","from_seq":1}})"));
    const Stream replay = read_stream(plain, 3);
    ASSERT_TRUE(replay.terminal);
    EXPECT_EQ(replay.binary_frames, 0) << "a session that did not ask got a binary frame";
    EXPECT_TRUE(joined(replay) == want) << "the JSON records' bytes differ";
    EXPECT_EQ(seqs(replay), seqs(live)) << "the two forms numbered the records differently";
  }

  // The replay in binary frames, from the log, past its first record.
  RawClient again(runner.socket());
  (void)call_method(again, 1, "runner.hello", R"({"binary_output":true})");
  ASSERT_TRUE(again.send_frame(R"({"id":4,"method":"exec.attach","params":{"job_id":")" + job + R"(","from_seq":3}})"));
  const Stream tail = read_stream(again, 4);
  ASSERT_TRUE(tail.terminal);
  ASSERT_FALSE(tail.output.empty());
  EXPECT_EQ(tail.output.begin()->first, 3);
  for (const auto& [seq, bytes] : tail.output) EXPECT_TRUE(bytes == live.output.at(seq)) << "seq " << seq;
}

TEST(BinaryOutputFrames, AnAskThatIsNotABooleanIsABadRequestAndTheSessionStaysOpen) {
  MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
  RunnerProcess runner;
  ASSERT_TRUE(runner.start()) << runner.log();
  RawClient c(runner.socket());
  const std::string refused = call_method(c, 1, "runner.hello", R"({"binary_output":"yes"})");
  EXPECT_EQ(json_field(refused, "/error/code"), "bad_request") << refused;
  const std::string hello = call_method(c, 2, "runner.hello", "{}");
  EXPECT_EQ(json_field(hello, "/result/binary_output"), "false") << hello;
}

}  // namespace
}  // namespace motor::test
