// The pieces protocol/messages is made of: the JSON writer, base64 and sizes.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/base64.hpp"
#include "protocol/json_writer.hpp"
#include "protocol/size.hpp"

namespace motor::protocol {
namespace {

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- JSON writer ----

std::string decode_json_string(const std::string& json) {
  simdjson::dom::parser parser;
  std::string_view s;
  EXPECT_EQ(parser.parse(json).get_string().get(s), simdjson::SUCCESS) << json;
  return std::string(s);
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

TEST(JsonWriter, EveryAsciiCharacterRoundTrips) {
  std::string all;
  for (int c = 0; c < 128; ++c) all.push_back(static_cast<char>(c));
  const std::string json = json_string(all);
  EXPECT_EQ(decode_json_string(json), all);
  for (char c : json) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "raw control character in " << json;
}

TEST(JsonWriter, ShortEscapes) {
  EXPECT_EQ(json_string("\"\\\n\r\t\b\f"), R"("\"\\\n\r\t\b\f")");
  EXPECT_EQ(json_string(std::string("\x00\x01\x1f\x7f", 4)), R"("\u0000\u0001\u001f\u007f")");
}

TEST(JsonWriter, ValidUtf8IsKept) {
  const std::string text = "h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xEF\xBF\xBF \xF4\x8F\xBF\xBF";
  EXPECT_EQ(json_string(text), "\"" + text + "\"");
  EXPECT_EQ(decode_json_string(json_string(text)), text);
}

TEST(JsonWriter, InvalidUtf8BecomesReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"\x80", r},                          // lone continuation byte
      {"a\xff" "b", "a" + r + "b"},         // never valid
      {"\xC3", r},                          // truncated at the end
      {"\xE2\x82", r + r},                  // truncated 3-byte sequence
      {"\xE2\x82" "A", r + r + "A"},        // interrupted by ASCII
      {"\xC0\x80", r + r},                  // overlong NUL
      {"\xE0\x80\xAF", r + r + r},          // overlong '/'
      {"\xED\xA0\x80", r + r + r},          // UTF-16 surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},  // above U+10FFFF
      {"\xF5\x80\x80\x80", r + r + r + r},  // never valid lead
      {"\xF0\x80\x80\x80", r + r + r + r},  // overlong 4-byte
  };
  for (const auto& c : cases) {
    const std::string json = json_string(c.in);
    EXPECT_EQ(decode_json_string(json), c.out) << json;
  }
}

TEST(JsonWriter, EveryByteValueProducesValidJson) {
  for (int a = 0; a < 256; ++a) {
    for (int b : {0x00, 0x41, 0x80, 0xBF, 0xC3, 0xFF}) {
      std::string s{static_cast<char>(a), static_cast<char>(b)};
      simdjson::dom::parser parser;
      std::string_view out;
      EXPECT_EQ(parser.parse(json_string(s)).get_string().get(out), simdjson::SUCCESS) << a << " " << b;
    }
  }
}

TEST(JsonWriter, Structure) {
  JsonWriter w;
  w.begin_object()
      .field("s", "x")
      .field("i", 5)
      .field("n", int64_t{-7})
      .field("u", uint64_t{18446744073709551615u})
      .field("d", 2.5)
      .field("b", false)
      .field("o", std::optional<std::string>())
      .field("p", std::optional<int64_t>(3))
      .field_null("z");
  w.key("a").begin_array().number(1).string("two").begin_object().end_object().begin_array().end_array().end_array();
  w.field_raw("r", R"({"k":[1]})");
  w.key("b64").base64("hi");
  w.end_object();
  EXPECT_EQ(w.str(), R"({"s":"x","i":5,"n":-7,"u":18446744073709551615,"d":2.5,"b":false,"o":null,"p":3,"z":null,)"
                     R"("a":[1,"two",{},[]],"r":{"k":[1]},"b64":"aGk="})");
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  EXPECT_EQ(parser.parse(w.str()).get(e), simdjson::SUCCESS);
}

TEST(JsonWriter, NonFiniteNumbersAreNull) {
  JsonWriter w;
  w.begin_array().number(std::numeric_limits<double>::infinity()).number(std::numeric_limits<double>::quiet_NaN()).end_array();
  EXPECT_EQ(w.str(), "[null,null]");
}

TEST(JsonWriter, KeysAreEscaped) {
  JsonWriter w;
  w.begin_object().field("a\"b\n\xff", 1).end_object();
  simdjson::dom::parser parser;
  int64_t v = 0;
  EXPECT_EQ(parser.parse(w.str())["a\"b\n\xEF\xBF\xBD"].get_int64().get(v), simdjson::SUCCESS) << w.str();
  EXPECT_EQ(v, 1);
}

// ---- base64 (RFC 4648) ----

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded), std::optional<std::string>(plain)) << encoded;
  }
}

TEST(Base64, AppendKeepsWhatIsThere) {
  std::string out = "x:";
  base64_append(out, "foo");
  EXPECT_EQ(out, "x:Zm9v");
}

TEST(Base64, UsesPlusAndSlash) {
  EXPECT_EQ(base64_encode("\xfb\xff\xbf"), "+/+/");
  EXPECT_EQ(base64_decode("+/+/"), std::optional<std::string>("\xfb\xff\xbf"));
}

TEST(Base64, EveryByteAtEveryLengthRoundTrips) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(255 - i));
  for (size_t n = 0; n <= all.size(); ++n) {
    const std::string in = all.substr(0, n);
    const std::string enc = base64_encode(in);
    EXPECT_EQ(enc.size(), (n + 2) / 3 * 4);
    EXPECT_EQ(base64_decode(enc), std::optional<std::string>(in)) << n;
  }
}

TEST(Base64, InvalidInputs) {
  for (const char* bad : {"Z", "Zg", "Zg=", "Zm9vY", "Z===", "====", "=Zg=", "Zg=a", "Zg==Zg==", "Zm9v!A==", "Zm9\n",
                          "Zm 9", "Zm9v-_==", "Zm9vYg=\0"}) {
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
  }
  EXPECT_FALSE(base64_decode(std::string_view("Zm\0v", 4)).has_value());
  EXPECT_FALSE(base64_decode("Zm9v\xc3\xa9==").has_value());
}

// ---- sizes ----

TEST(Size, Values) {
  EXPECT_EQ(*parse_size("0"), 0);
  EXPECT_EQ(*parse_size("512"), 512);
  EXPECT_EQ(*parse_size("64K"), 64 * 1024);
  EXPECT_EQ(*parse_size("64k"), 64 * 1024);
  EXPECT_EQ(*parse_size("256M"), int64_t{256} << 20);
  EXPECT_EQ(*parse_size("2G"), int64_t{2} << 30);
  EXPECT_EQ(*parse_size("2g"), int64_t{2} << 30);
  EXPECT_EQ(*parse_size("1KB"), 1024);
  EXPECT_EQ(*parse_size("1KiB"), 1024);
  EXPECT_EQ(*parse_size("3MiB"), int64_t{3} << 20);
  EXPECT_EQ(*parse_size("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(*parse_size("8589934591G"), int64_t{8589934591} << 30);
}

TEST(Size, Errors) {
  for (const char* bad : {"", "K", "1T", "1Kb", "1 K", " 1", "1.5G", "0x10", "1KK", "1GiBs", "+1"}) {
    auto s = parse_size(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.error().code, "bad_request");
    EXPECT_TRUE(contains(s.error().message, "expected a size")) << bad << " -> " << s.error().message;
  }
  EXPECT_TRUE(contains(parse_size("-1").error().message, "cannot be negative"));
  EXPECT_TRUE(contains(parse_size("8589934592G").error().message, "size too large"));
  EXPECT_TRUE(contains(parse_size("99999999999999999999").error().message, "size too large"));
}

}  // namespace
}  // namespace motor::protocol
