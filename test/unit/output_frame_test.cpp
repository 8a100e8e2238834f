// Output records as whole frames (protocol/output_frame.hpp): the JSON form is byte for byte the
// record the runner always sent, and a binary frame decodes to the same Message.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "protocol/output_frame.hpp"

namespace motor::protocol {
namespace {

std::string all_bytes() {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 7));
  return s;
}

// The payload of the one frame in `frame`.
std::string payload_of(const std::string& frame) {
  FrameDecoder decoder;
  std::vector<std::string> frames;
  EXPECT_TRUE(decoder.feed(frame, frames));
  EXPECT_EQ(frames.size(), 1u);
  EXPECT_FALSE(decoder.mid_frame());
  return frames.empty() ? std::string() : frames[0];
}

TEST(OutputFrame, TheJsonFrameIsTheRecordWithItsIdFramed) {
  const std::string bytes = all_bytes();
  for (std::optional<int64_t> truncated : {std::optional<int64_t>{}, std::optional<int64_t>{17}}) {
    const std::string frame = json_output_frame(OutputHead{12, 40, "stderr", truncated}, bytes);
    EXPECT_EQ(frame, encode_frame(with_request_id(12, encode_output(40, "stderr", bytes, truncated))));
  }
}

TEST(OutputFrame, ABinaryFrameDecodesToTheSameMessage) {
  simdjson::dom::parser parser;
  const std::string bytes = all_bytes();
  for (std::string_view body : {std::string_view(bytes), std::string_view()}) {
    const OutputHead head{7, 3, "stdout", 2};
    const std::string frame = binary_output_frame_head(head, body.size()) + std::string(body);
    const std::string payload = payload_of(frame);
    ASSERT_EQ(payload[0], kBinaryFrameMark);
    auto binary = parse_message(parser, payload);
    ASSERT_TRUE(binary) << binary.error().message;
    auto json = parse_message(parser, payload_of(json_output_frame(head, body)));
    ASSERT_TRUE(json);
    EXPECT_EQ(binary->id, json->id);
    EXPECT_EQ(binary->type, "output");
    EXPECT_EQ(binary->seq, json->seq);
    EXPECT_EQ(binary->stream, json->stream);
    EXPECT_TRUE(binary->bytes == json->bytes);
    EXPECT_EQ(binary->raw, R"({"id":7,"type":"output","seq":3,"stream":"stdout","truncated_before_seq":2})");
  }
}

TEST(OutputFrame, ABrokenBinaryFrameIsRefusedNotMisread) {
  simdjson::dom::parser parser;
  const std::string good = payload_of(binary_output_frame_head(OutputHead{1, 2, "stdout", {}}, 3) + "abc");
  const std::string header_too_long = std::string(1, '\0') + std::string("\0\0\x10\0", 4) + "{}";
  const std::string no_header = std::string(1, '\0') + std::string("\0\0\0\0", 4) + "abc";
  const std::string cut = good.substr(0, 3);
  std::string not_output = std::string(1, '\0') + std::string("\0\0\0\x19", 4) + R"({"id":1,"type":"started"})";
  // Found by fuzz_client_stream: a binary frame whose header is an error or a result was read as one.
  const std::string error = R"({"id":1,"error":{"code":"bad_request","message":"no"}})";
  const std::string as_error = std::string(1, '\0') + std::string("\0\0\0", 3) + static_cast<char>(error.size()) + error + "xyz";
  const std::string result = R"({"id":1,"result":{}})";
  const std::string as_result = std::string(1, '\0') + std::string("\0\0\0", 3) + static_cast<char>(result.size()) + result;
  for (const std::string& bad : {header_too_long, no_header, cut, not_output, as_error, as_result}) {
    auto m = parse_message(parser, bad);
    EXPECT_FALSE(m) << "read a broken binary frame";
    if (!m) {
      EXPECT_EQ(m.error().code, "bad_request");
    }
  }
  auto m = parse_message(parser, good);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->bytes, "abc");
}

}  // namespace
}  // namespace motor::protocol
