// Frames: a 4-byte big-endian length and a payload, reassembled from reads that split or join
// them anywhere; the length is checked against the limit before anything is buffered.
#include "protocol/frame.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motor::protocol {
namespace {

std::string header(uint32_t n) {
  std::string h(4, '\0');
  h[0] = static_cast<char>(n >> 24);
  h[1] = static_cast<char>(n >> 16);
  h[2] = static_cast<char>(n >> 8);
  h[3] = static_cast<char>(n);
  return h;
}

TEST(Frame, EncodeWritesBigEndianLengthThenPayload) {
  const std::string f = encode_frame("{\"a\":1}");
  ASSERT_EQ(f.size(), 4u + 7u);
  EXPECT_EQ(f.substr(0, 4), header(7));
  EXPECT_EQ(f.substr(4), "{\"a\":1}");
}

TEST(Frame, AppendFrameAppendsAfterExistingBytes) {
  std::string out = "xy";
  append_frame(out, "{}");
  EXPECT_EQ(out, "xy" + header(2) + "{}");
}

TEST(Frame, LengthUsesAllFourBytes) {
  const std::string payload(0x010203, 'a');
  const std::string f = encode_frame(payload);
  EXPECT_EQ(f.substr(0, 4), std::string("\x00\x01\x02\x03", 4));
}

TEST(Frame, OneFrameInOneRead) {
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(encode_frame("{\"id\":1}"), frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], "{\"id\":1}");
  EXPECT_FALSE(d.mid_frame());
  EXPECT_FALSE(d.broken());
}

TEST(Frame, SplitAtEveryByteBoundary) {
  const std::string stream = encode_frame("{\"id\":1,\"method\":\"m\"}") + encode_frame("{\"id\":2}");
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameDecoder d;
    std::vector<std::string> frames;
    ASSERT_TRUE(d.feed(std::string_view(stream).substr(0, cut), frames).ok()) << "cut at " << cut;
    ASSERT_TRUE(d.feed(std::string_view(stream).substr(cut), frames).ok()) << "cut at " << cut;
    ASSERT_EQ(frames.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(frames[0], "{\"id\":1,\"method\":\"m\"}") << "cut at " << cut;
    EXPECT_EQ(frames[1], "{\"id\":2}") << "cut at " << cut;
    EXPECT_FALSE(d.mid_frame()) << "cut at " << cut;
  }
}

TEST(Frame, OneByteAtATime) {
  const std::string stream = encode_frame("{\"a\":\"b\"}") + encode_frame("[1,2,3]");
  FrameDecoder d;
  std::vector<std::string> frames;
  for (size_t i = 0; i < stream.size(); ++i) {
    ASSERT_TRUE(d.feed(std::string_view(stream).substr(i, 1), frames).ok()) << "byte " << i;
    // Mid-frame from the first header byte until the last payload byte of each frame.
    const bool at_boundary = i + 1 == 4 + 9 || i + 1 == stream.size();
    EXPECT_EQ(d.mid_frame(), !at_boundary) << "after byte " << i;
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0], "{\"a\":\"b\"}");
  EXPECT_EQ(frames[1], "[1,2,3]");
}

TEST(Frame, SeveralFramesInOneRead) {
  std::string stream;
  for (int i = 0; i < 50; ++i) append_frame(stream, "{\"id\":" + std::to_string(i) + "}");
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(stream, frames).ok());
  ASSERT_EQ(frames.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(frames[static_cast<size_t>(i)], "{\"id\":" + std::to_string(i) + "}");
  EXPECT_FALSE(d.mid_frame());
}

TEST(Frame, SeveralFramesAndAPartOfTheNext) {
  const std::string third = encode_frame("{\"c\":3}");
  const std::string stream = encode_frame("{\"a\":1}") + encode_frame("{\"b\":2}") + third.substr(0, 6);
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(stream, frames).ok());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_TRUE(d.mid_frame());
  ASSERT_TRUE(d.feed(std::string_view(third).substr(6), frames).ok());
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[2], "{\"c\":3}");
  EXPECT_FALSE(d.mid_frame());
}

TEST(Frame, FramesAreAppendedToWhatTheVectorHolds) {
  FrameDecoder d;
  std::vector<std::string> frames{"earlier"};
  ASSERT_TRUE(d.feed(encode_frame("{}"), frames).ok());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0], "earlier");
  EXPECT_EQ(frames[1], "{}");
}

TEST(Frame, EmptyFeedIsNothing) {
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed("", frames).ok());
  EXPECT_TRUE(frames.empty());
  EXPECT_FALSE(d.mid_frame());
}

TEST(Frame, ExactlyOneMiBIsAccepted) {
  const std::string payload(kMaxFrameBytes, 'x');
  const std::string stream = encode_frame(payload);
  FrameDecoder d;
  std::vector<std::string> frames;
  // In three reads, as a socket would deliver it.
  ASSERT_TRUE(d.feed(std::string_view(stream).substr(0, 3), frames).ok());
  ASSERT_TRUE(d.feed(std::string_view(stream).substr(3, 500000), frames).ok());
  EXPECT_TRUE(frames.empty());
  EXPECT_TRUE(d.mid_frame());
  ASSERT_TRUE(d.feed(std::string_view(stream).substr(500003), frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), kMaxFrameBytes);
  EXPECT_EQ(frames[0], payload);
  EXPECT_FALSE(d.broken());
}

TEST(Frame, OneMiBPlusOneIsRefusedFromTheHeaderAlone) {
  FrameDecoder d;
  std::vector<std::string> frames;
  // Only the header: the decoder refuses before a single payload byte arrives.
  auto st = d.feed(header(static_cast<uint32_t>(kMaxFrameBytes + 1)), frames);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "bad_request");
  EXPECT_NE(st.error().message.find("1048577"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("1048576"), std::string::npos) << st.error().message;
  EXPECT_TRUE(d.broken());
  EXPECT_TRUE(frames.empty());
}

TEST(Frame, HugeLengthIsRefusedWithoutBuffering) {
  FrameDecoder d;
  std::vector<std::string> frames;
  // 0xFFFFFFFF followed by some payload in the same read: refused, nothing kept.
  auto st = d.feed(std::string("\xff\xff\xff\xff", 4) + std::string(100, 'a'), frames);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "bad_request");
  EXPECT_TRUE(d.broken());
  EXPECT_TRUE(frames.empty());
  EXPECT_FALSE(d.mid_frame());
}

TEST(Frame, SmallerLimitIsHonoured) {
  FrameDecoder d(16);
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(encode_frame(std::string(16, 'a')), frames).ok());
  EXPECT_EQ(frames.size(), 1u);
  EXPECT_FALSE(d.feed(encode_frame(std::string(17, 'a')), frames).ok());
  EXPECT_EQ(frames.size(), 1u);
}

TEST(Frame, ZeroLengthIsRefused) {
  FrameDecoder d;
  std::vector<std::string> frames;
  auto st = d.feed(header(0), frames);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "bad_request");
  EXPECT_NE(st.error().message.find("empty frame"), std::string::npos) << st.error().message;
  EXPECT_TRUE(d.broken());
}

TEST(Frame, FramesBeforeABadHeaderAreStillDelivered) {
  FrameDecoder d;
  std::vector<std::string> frames;
  auto st = d.feed(encode_frame("{\"id\":1}") + header(0) + encode_frame("{\"id\":2}"), frames);
  ASSERT_FALSE(st.ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], "{\"id\":1}");
}

TEST(Frame, GarbageHeaderBreaksTheStream) {
  // Someone typing text at the socket: "GET " reads as a length of 0x47455420 bytes (>1 MiB).
  FrameDecoder d;
  std::vector<std::string> frames;
  auto st = d.feed("GET / HTTP/1.1\r\n\r\n", frames);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "bad_request");
  EXPECT_TRUE(d.broken());
  EXPECT_TRUE(frames.empty());
}

TEST(Frame, GarbagePayloadIsTheParsersProblemNotTheDecoders) {
  // The decoder delivers bytes; it does not look inside them.
  FrameDecoder d;
  std::vector<std::string> frames;
  const std::string junk("\x00\xff\x80not json", 11);
  ASSERT_TRUE(d.feed(encode_frame(junk), frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], junk);
}

TEST(Frame, TornHeaderIsMidFrame) {
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(std::string("\x00\x00", 2), frames).ok());
  EXPECT_TRUE(d.mid_frame());
  EXPECT_TRUE(frames.empty());
}

TEST(Frame, TornPayloadIsMidFrame) {
  const std::string f = encode_frame("{\"id\":1,\"method\":\"exec.run\"}");
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(std::string_view(f).substr(0, f.size() - 1), frames).ok());
  EXPECT_TRUE(d.mid_frame());
  EXPECT_TRUE(frames.empty());
}

TEST(Frame, HeaderAloneIsMidFrame) {
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_TRUE(d.feed(header(10), frames).ok());
  EXPECT_TRUE(d.mid_frame());
}

TEST(Frame, RefusesInputAfterBreaking) {
  FrameDecoder d;
  std::vector<std::string> frames;
  ASSERT_FALSE(d.feed(header(0), frames).ok());
  ASSERT_TRUE(d.broken());
  // A perfectly good frame afterwards is refused: the boundary can no longer be trusted.
  auto st = d.feed(encode_frame("{\"id\":1}"), frames);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "bad_request");
  EXPECT_NE(st.error().message.find("broken"), std::string::npos) << st.error().message;
  EXPECT_TRUE(frames.empty());
  // Even an empty feed.
  EXPECT_FALSE(d.feed("", frames).ok());
}

TEST(Frame, DecoderIsReusableAcrossManyFrames) {
  FrameDecoder d;
  std::vector<std::string> frames;
  for (int i = 0; i < 1000; ++i) {
    const std::string payload(static_cast<size_t>(i % 37 + 1), static_cast<char>('a' + i % 26));
    ASSERT_TRUE(d.feed(encode_frame(payload), frames).ok());
    ASSERT_EQ(frames.back(), payload);
  }
  EXPECT_EQ(frames.size(), 1000u);
}

}  // namespace
}  // namespace motor::protocol
