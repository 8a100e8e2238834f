// The guest-agent protocol as the runner speaks it (src/vm/qga_protocol): what an untrusted
// guest can send is bounded before it is decoded, and decoded strictly.
#include "vm/qga_protocol.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <vector>

namespace {

using motor::vm::QgaFramer;

TEST(QgaFramer, SplitsMessagesAcrossArbitraryChunks) {
  const std::string stream = "{\"return\": {}}\n{\"return\": {\"pid\": 7, \"s\": \"a}{\\\"b\"}}\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    QgaFramer f(1024);
    std::vector<std::string> out;
    ASSERT_TRUE(f.feed(stream.substr(0, cut), out).ok());
    ASSERT_TRUE(f.feed(stream.substr(cut), out).ok());
    ASSERT_EQ(out.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(out[1], "{\"return\": {\"pid\": 7, \"s\": \"a}{\\\"b\"}}");
  }
}

TEST(QgaFramer, DelimiterDiscardsAPartialMessage) {
  QgaFramer f(1024);
  std::vector<std::string> out;
  ASSERT_TRUE(f.feed("{\"return\": {\"half", out).ok());
  ASSERT_TRUE(f.feed("\xff{\"return\": 42}\n", out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], "{\"return\": 42}");
}

TEST(QgaFramer, RefusesAMessageOverTheBoundBeforeHoldingIt) {
  QgaFramer f(4096);
  std::vector<std::string> out;
  std::string big = "{\"return\": \"" + std::string(10000, 'x');
  auto s = f.feed(big, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("over 4096 bytes"), std::string::npos);
  EXPECT_TRUE(out.empty());
}

TEST(QgaFramer, RefusesBytesOutsideAnObject) {
  QgaFramer f(1024);
  std::vector<std::string> out;
  EXPECT_FALSE(f.feed("hello", out).ok());
}

TEST(QgaRequests, AreOneJsonLineEach) {
  EXPECT_EQ(motor::vm::qga_sync_delimited(5), "{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":5}}\n");
  EXPECT_EQ(motor::vm::qga_exec("/motor/run", {"a\"b", "c"}, {"X=1"}),
            "{\"execute\":\"guest-exec\",\"arguments\":{\"path\":\"/motor/run\",\"arg\":[\"a\\\"b\",\"c\"],"
            "\"env\":[\"X=1\"],\"capture-output\":false}}\n");
  EXPECT_EQ(motor::vm::qga_file_read(3, 65536),
            "{\"execute\":\"guest-file-read\",\"arguments\":{\"handle\":3,\"count\":65536}}\n");
}

TEST(QgaReplies, DecodeStrictly) {
  simdjson::dom::parser p;
  EXPECT_EQ(*motor::vm::qga_parse_int_return(p, "{\"return\": 99}"), 99);
  EXPECT_EQ(*motor::vm::qga_parse_exec(p, "{\"return\": {\"pid\": 12}}"), 12);
  auto err = motor::vm::qga_parse_exec(p, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no such file\"}}");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message.find("no such file"), std::string::npos);
  EXPECT_FALSE(motor::vm::qga_parse_exec(p, "[1,2]").ok());
  EXPECT_FALSE(motor::vm::qga_parse_exec(p, "{\"return\": {}}").ok());

  auto st = motor::vm::qga_parse_exec_status(p, "{\"return\": {\"exited\": true, \"exitcode\": 3}}");
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->exited);
  EXPECT_EQ(st->exit_code, 3);
  EXPECT_FALSE(st->signal);

  auto chunk = motor::vm::qga_parse_file_read(p, "{\"return\": {\"count\": 5, \"buf-b64\": \"aGVsbG8=\", \"eof\": false}}", 64);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->bytes, "hello");
  // More than asked for, or a count that does not match the data: refused.
  EXPECT_FALSE(motor::vm::qga_parse_file_read(p, "{\"return\": {\"count\": 5, \"buf-b64\": \"aGVsbG8=\", \"eof\": false}}", 4).ok());
  EXPECT_FALSE(motor::vm::qga_parse_file_read(p, "{\"return\": {\"count\": 4, \"buf-b64\": \"aGVsbG8=\", \"eof\": false}}", 64).ok());
  EXPECT_FALSE(motor::vm::qga_parse_file_read(p, "{\"return\": {\"count\": 5, \"buf-b64\": \"!!!!\", \"eof\": false}}", 64).ok());
}

TEST(Utf8Sanitizer, KeepsSequencesSplitAcrossChunksAndReplacesInvalidBytes) {
  motor::vm::Utf8Sanitizer s;
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(s.feed("a" + euro.substr(0, 1)), "a");
  EXPECT_EQ(s.feed(euro.substr(1)), euro);
  EXPECT_EQ(s.feed("\xFF" "b" "\xC0\xAF" "\xED\xA0\x80"), "\xEF\xBF\xBD" "b" "\xEF\xBF\xBD\xEF\xBF\xBD" "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(s.feed("\xF0\x9F"), "");
  EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(s.flush(), "");
}

}  // namespace
