// Requests, run parameters and job references (protocol/messages). Replies and stream records are
// tested in wire_records_test.cpp; the JSON writer, base64 and sizes in wire_pieces_test.cpp.
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

constexpr size_t kLimit = 1 << 20;
constexpr const char* kJobId = "01890a5d-ac96-774b-bcce-b302099a8057";

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- request envelope ----

class RequestTest : public ::testing::Test {
 protected:
  // The error message of a payload that must be refused with bad_request.
  std::string error_of(std::string_view payload, std::optional<int64_t>* id_out = nullptr) {
    auto r = parse_request(parser_, payload, id_out);
    EXPECT_FALSE(r.ok()) << "accepted: " << payload;
    if (r.ok()) return "";
    EXPECT_EQ(r.error().code, "bad_request");
    return r.error().message;
  }
  simdjson::dom::parser parser_;
};

TEST_F(RequestTest, ValidRequest) {
  std::optional<int64_t> id;
  auto r = parse_request(parser_, R"({"id":7,"method":"exec.run","params":{"command":"true", "x" : [1, 2]}})", &id);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->id, 7);
  EXPECT_EQ(id, std::optional<int64_t>(7));
  EXPECT_EQ(r->method, "exec.run");
  EXPECT_EQ(r->params_json, R"({"command":"true","x":[1,2]})");  // minified
}

TEST_F(RequestTest, ParamsAbsentOrNullIsEmptyObject) {
  auto a = parse_request(parser_, R"({"id":1,"method":"exec.list"})", nullptr);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->params_json, "{}");
  auto b = parse_request(parser_, R"({"id":1,"method":"exec.list","params":null})", nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->params_json, "{}");
}

TEST_F(RequestTest, NegativeAndLargeIdsAreWholeNumbers) {
  auto r = parse_request(parser_, R"({"id":-5,"method":"m"})", nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->id, -5);
  auto big = parse_request(parser_, R"({"id":9223372036854775807,"method":"m"})", nullptr);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->id, INT64_MAX);
}

TEST_F(RequestTest, InvalidUtf8) {
  EXPECT_TRUE(contains(error_of("{\"id\":1,\"method\":\"\xff\"}"), "not valid UTF-8"));
  EXPECT_TRUE(contains(error_of("{\"id\":1,\"method\":\"m\",\"params\":{\"a\":\"\xc3\"}}"), "not valid UTF-8"));
  EXPECT_TRUE(contains(error_of("{\"id\":1,\"method\":\"\xed\xa0\x80\"}"), "not valid UTF-8"));  // a surrogate
}

TEST_F(RequestTest, InvalidJson) {
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":"m")"), "not valid JSON"));
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":"m",})"), "not valid JSON"));
  EXPECT_TRUE(contains(error_of("{'id':1}"), "not valid JSON"));
  EXPECT_TRUE(contains(error_of(""), "not valid JSON"));
  EXPECT_TRUE(contains(error_of(R"({"id":1}{"id":2})"), "not valid JSON"));
}

TEST_F(RequestTest, NotAnObject) {
  EXPECT_TRUE(contains(error_of("[1,2]"), "must be a JSON object"));
  EXPECT_TRUE(contains(error_of("42"), "must be a JSON object"));
  EXPECT_TRUE(contains(error_of("\"exec.run\""), "must be a JSON object"));
  EXPECT_TRUE(contains(error_of("null"), "must be a JSON object"));
}

TEST_F(RequestTest, MissingId) {
  std::optional<int64_t> id;
  EXPECT_TRUE(contains(error_of(R"({"method":"exec.run"})", &id), "missing field \"id\""));
  EXPECT_FALSE(id.has_value());
}

TEST_F(RequestTest, WrongTypedId) {
  std::optional<int64_t> id;
  EXPECT_TRUE(contains(error_of(R"({"id":"1","method":"m"})", &id), "field \"id\" must be a whole number, got a string"));
  EXPECT_FALSE(id.has_value());
  EXPECT_TRUE(contains(error_of(R"({"id":1.5,"method":"m"})"), "field \"id\" must be a whole number, got 1.5"));
  EXPECT_TRUE(contains(error_of(R"({"id":null,"method":"m"})"), "field \"id\" must be a whole number, got null"));
  EXPECT_TRUE(contains(error_of(R"({"id":true,"method":"m"})"), "field \"id\" must be a whole number, got a boolean"));
  EXPECT_TRUE(contains(error_of(R"({"id":[1],"method":"m"})"), "field \"id\" must be a whole number, got an array"));
  EXPECT_TRUE(contains(error_of(R"({"id":18446744073709551615,"method":"m"})"), "field \"id\""));
}

TEST_F(RequestTest, MissingMethodStillReportsTheId) {
  std::optional<int64_t> id;
  EXPECT_TRUE(contains(error_of(R"({"id":3})", &id), "missing field \"method\""));
  EXPECT_EQ(id, std::optional<int64_t>(3));
}

TEST_F(RequestTest, WrongTypedMethod) {
  std::optional<int64_t> id;
  EXPECT_TRUE(contains(error_of(R"({"id":4,"method":5})", &id), "field \"method\" must be a string, got a number"));
  EXPECT_EQ(id, std::optional<int64_t>(4));
  EXPECT_TRUE(contains(error_of(R"({"id":4,"method":{}})"), "field \"method\" must be a string, got an object"));
}

TEST_F(RequestTest, EmptyOrOverlongMethod) {
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":""})"), "field \"method\" must name a method"));
  const std::string long_method = R"({"id":1,"method":")" + std::string(65, 'm') + R"("})";
  EXPECT_TRUE(contains(error_of(long_method), "field \"method\" must name a method"));
  const std::string max_method = R"({"id":1,"method":")" + std::string(64, 'm') + R"("})";
  EXPECT_TRUE(parse_request(parser_, max_method, nullptr).ok());
}

TEST_F(RequestTest, WrongTypedParams) {
  std::optional<int64_t> id;
  EXPECT_TRUE(contains(error_of(R"({"id":9,"method":"m","params":[1]})", &id), "field \"params\" must be an object, got an array"));
  EXPECT_EQ(id, std::optional<int64_t>(9));
  EXPECT_TRUE(contains(error_of(R"({"id":9,"method":"m","params":"x"})"), "field \"params\" must be an object, got a string"));
  EXPECT_TRUE(contains(error_of(R"({"id":9,"method":"m","params":0})"), "field \"params\" must be an object, got a number"));
}

// Issue 14.14: numbers, booleans and duplicate keys get answers that say what is wrong.
TEST_F(RequestTest, AWholeNumberWrittenAsADoubleIsThatNumber) {
  auto r = parse_request(parser_, R"({"id":5.0,"method":"m"})", nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->id, 5);
  auto e = parse_request(parser_, R"({"id":-2e3,"method":"m"})", nullptr);
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e->id, -2000);
}

TEST_F(RequestTest, OutOfRangeNumbersAreNamedAsSuch) {
  EXPECT_TRUE(contains(error_of(R"({"id":18446744073709551615,"method":"m"})"),
                       "field \"id\" must be a whole number from -9223372036854775808 to 9223372036854775807, got 18446744073709551615"));
  EXPECT_TRUE(contains(error_of(R"({"id":1e30,"method":"m"})"), "field \"id\" must be a whole number from -9223372036854775808"));
  // Past a double's range: a valid JSON number the runner cannot hold, not invalid JSON.
  const std::string huge = error_of(R"({"id":1,"method":"m","params":{"timeout":1e400}})");
  EXPECT_TRUE(contains(huge, "number 1e400 is out of range")) << huge;
  EXPECT_FALSE(contains(huge, "not valid JSON")) << huge;
  EXPECT_TRUE(contains(error_of(R"({"id":-1e999,"method":"m"})"), "number -1e999 is out of range"));
  // A malformed number is still called malformed.
  EXPECT_TRUE(contains(error_of(R"({"id":01,"method":"m"})"), "not valid JSON"));
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":"m","params":{"a":"1e400 in a string","b":1.}})"), "malformed number 1."));
}

TEST_F(RequestTest, DuplicateKeysAreRefusedAtAnyDepth) {
  std::optional<int64_t> id;
  EXPECT_TRUE(contains(error_of(R"({"id":3,"method":"exec.list","method":"runner.drain"})", &id),
                       "key \"method\" appears twice in one object"));
  EXPECT_EQ(id, std::optional<int64_t>(3));  // the error can still name the request
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":"exec.run","params":{"command":"true","command":"rm -rf ~"}})"),
                       "key \"command\" appears twice"));
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":"exec.run","params":{"command":"x","env":{"A":"1","A":"2"}}})"),
                       "key \"A\" appears twice"));
  EXPECT_TRUE(contains(error_of(R"({"id":1,"method":"m","params":{"l":[{"k":1,"k":2}]}})"), "key \"k\" appears twice"));
  // The same key in different objects is fine.
  EXPECT_TRUE(parse_request(parser_, R"({"id":1,"method":"m","params":{"a":{"id":1},"b":{"id":2}}})", nullptr).ok());
}

TEST(FlagParams, WrongTypedBooleansAreRefused) {
  simdjson::dom::parser parser;
  auto absent = parse_flag(parser, "{}", "wait");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(*absent);
  auto yes = parse_flag(parser, R"({"wait":true})", "wait");
  ASSERT_TRUE(yes.ok());
  EXPECT_TRUE(*yes);
  for (const char* params : {R"({"wait":"yes"})", R"({"wait":1})", R"({"wait":[true]})"}) {
    auto r = parse_flag(parser, params, "wait");
    ASSERT_FALSE(r.ok()) << params;
    EXPECT_EQ(r.error().code, "bad_request");
    EXPECT_TRUE(contains(r.error().message, "field \"params.wait\" must be a boolean")) << r.error().message;
  }
}

// ---- exec.run parameters ----

class RunParamsTest : public ::testing::Test {
 protected:
  Expected<RunParams> parse(std::string_view params, size_t limit = kLimit) {
    return parse_run_params(parser_, params, limit);
  }
  RunParams ok(std::string_view params) {
    auto p = parse(params);
    EXPECT_TRUE(p.ok()) << params << ": " << (p.ok() ? "" : p.error().message);
    return p.ok() ? *p : RunParams{};
  }
  std::string error_of(std::string_view params, size_t limit = kLimit) {
    auto p = parse(params, limit);
    EXPECT_FALSE(p.ok()) << "accepted: " << params;
    if (p.ok()) return "";
    EXPECT_EQ(p.error().code, "bad_request");
    return p.error().message;
  }
  simdjson::dom::parser parser_;
};

TEST_F(RunParamsTest, Defaults) {
  const RunParams p = ok(R"({"command":"make"})");
  EXPECT_EQ(p.workspace_key, "default");
  EXPECT_EQ(p.repository_root, "");
  EXPECT_EQ(p.cwd, "");
  EXPECT_EQ(p.command, std::optional<std::string>("make"));
  EXPECT_TRUE(p.argv.empty());
  EXPECT_TRUE(p.env.empty());
  EXPECT_FALSE(p.weight_hint.has_value());
  EXPECT_FALSE(p.timeout_s.has_value());
  EXPECT_FALSE(p.queue_wait_limit_s.has_value());
  EXPECT_TRUE(p.siblings.empty());
  EXPECT_FALSE(p.cpus.has_value());
  EXPECT_FALSE(p.memory_bytes.has_value());
  EXPECT_EQ(p.network, Network::kOffline);
  EXPECT_EQ(p.platform, Platform::kLinux);
  EXPECT_FALSE(p.direct);
}

TEST_F(RunParamsTest, EveryField) {
  const RunParams p = ok(R"({
    "workspace_key": "ws-1", "repository_root": "/home/a/repo", "cwd": "/home/a/repo/sub",
    "argv": ["cargo", "test", "--", "x y"], "env": {"RUST_LOG": "debug", "CARGO_TERM_COLOR": "never"},
    "weight_hint": 2.5, "timeout": 600, "queue_wait_limit_s": 0, "siblings": ["a", "b"],
    "cpus": 4, "memory": 1073741824, "network": "outbound", "platform": "windows", "direct": true})");
  EXPECT_EQ(p.workspace_key, "ws-1");
  EXPECT_EQ(p.repository_root, "/home/a/repo");
  EXPECT_EQ(p.cwd, "/home/a/repo/sub");
  EXPECT_FALSE(p.command.has_value());
  EXPECT_EQ(p.argv, (std::vector<std::string>{"cargo", "test", "--", "x y"}));
  ASSERT_EQ(p.env.size(), 2u);
  EXPECT_EQ(p.env[0], (std::pair<std::string, std::string>{"RUST_LOG", "debug"}));
  EXPECT_EQ(p.env[1], (std::pair<std::string, std::string>{"CARGO_TERM_COLOR", "never"}));
  EXPECT_EQ(p.weight_hint, std::optional<double>(2.5));
  EXPECT_EQ(p.timeout_s, std::optional<int64_t>(600));
  EXPECT_EQ(p.queue_wait_limit_s, std::optional<int64_t>(0));
  EXPECT_EQ(p.siblings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.cpus, std::optional<int64_t>(4));
  EXPECT_EQ(p.memory_bytes, std::optional<int64_t>(1073741824));
  EXPECT_EQ(p.network, Network::kOutbound);
  EXPECT_EQ(p.platform, Platform::kWindows);
  EXPECT_TRUE(p.direct);
}

TEST_F(RunParamsTest, NullMeansAbsent) {
  const RunParams p = ok(R"({"command":"x","argv":null,"timeout":null,"memory":null,"env":null,"workspace_key":null,"direct":null})");
  EXPECT_EQ(p.command, std::optional<std::string>("x"));
  EXPECT_FALSE(p.timeout_s.has_value());
  EXPECT_FALSE(p.memory_bytes.has_value());
  EXPECT_EQ(p.workspace_key, "default");
}

TEST_F(RunParamsTest, UnknownFieldsAreIgnored) {
  EXPECT_EQ(ok(R"({"command":"x","future_field":{"a":[1]}})").command, std::optional<std::string>("x"));
}

TEST_F(RunParamsTest, TimeoutAndItsAlias) {
  EXPECT_EQ(ok(R"({"command":"x","timeout_s":30})").timeout_s, std::optional<int64_t>(30));
  // "timeout" wins over "timeout_s".
  EXPECT_EQ(ok(R"({"command":"x","timeout":10,"timeout_s":30})").timeout_s, std::optional<int64_t>(10));
  // A whole number written as a double is a whole number.
  EXPECT_EQ(ok(R"({"command":"x","timeout":5.0})").timeout_s, std::optional<int64_t>(5));
  EXPECT_EQ(ok(R"({"command":"x","timeout":1e3})").timeout_s, std::optional<int64_t>(1000));
}

TEST_F(RunParamsTest, TimeoutOutOfRange) {
  EXPECT_TRUE(contains(error_of(R"({"command":"x","timeout":0})"), "field \"params.timeout\" must be a whole number from 1 to"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","timeout":-1})"), "field \"params.timeout\" must be a whole number from 1"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","timeout":1.5})"), "field \"params.timeout\" must be a whole number, got 1.5"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","timeout":1e300})"), "field \"params.timeout\""));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","timeout":18446744073709551615})"), "field \"params.timeout\""));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","timeout_s":0})"), "field \"params.timeout_s\""));
}

TEST_F(RunParamsTest, WrongTypes) {
  struct Case {
    const char* params;
    const char* message;
  };
  const Case cases[] = {
      {R"({"command":"x","workspace_key":1})", "field \"params.workspace_key\" must be a string, got a number"},
      {R"({"command":"x","repository_root":[]})", "field \"params.repository_root\" must be a string, got an array"},
      {R"({"command":"x","cwd":true})", "field \"params.cwd\" must be a string, got a boolean"},
      {R"({"command":["x"]})", "field \"params.command\" must be a string, got an array"},
      {R"({"argv":"ls -l"})", "field \"params.argv\" must be an array of strings, got a string"},
      {R"({"argv":["ls",1]})", "field \"params.argv[1]\" must be a string, got a number"},
      {R"({"command":"x","env":["A=1"]})", "field \"params.env\" must be an object of strings, got an array"},
      {R"({"command":"x","env":{"RUST_LOG":1}})", "field \"params.env.RUST_LOG\" must be a string"},
      {R"({"command":"x","weight_hint":"heavy"})", "field \"params.weight_hint\" must be a number, got a string"},
      {R"({"command":"x","timeout":"10"})", "field \"params.timeout\" must be a whole number, got a string"},
      {R"({"command":"x","queue_wait_limit_s":{}})", "field \"params.queue_wait_limit_s\" must be a whole number, got an object"},
      {R"({"command":"x","siblings":"a"})", "field \"params.siblings\" must be an array of strings, got a string"},
      {R"({"command":"x","siblings":[null]})", "field \"params.siblings[0]\" must be a string, got null"},
      {R"({"command":"x","cpus":"4"})", "field \"params.cpus\" must be a whole number, got a string"},
      {R"({"command":"x","network":1})", "field \"params.network\" must be a string, got a number"},
      {R"({"command":"x","platform":false})", "field \"params.platform\" must be a string, got a boolean"},
      {R"({"command":"x","direct":"yes"})", "field \"params.direct\" must be a boolean, got a string"},
      {R"({"command":"x","direct":1})", "field \"params.direct\" must be a boolean, got a number"},
  };
  for (const auto& c : cases) {
    EXPECT_TRUE(contains(error_of(c.params), c.message)) << c.params << " -> " << error_of(c.params);
  }
}

TEST_F(RunParamsTest, TheFirstProblemIsReported) {
  EXPECT_TRUE(contains(error_of(R"({"workspace_key":1,"cwd":2})"), "params.workspace_key"));
}

TEST_F(RunParamsTest, RangesOfSmallNumbers) {
  EXPECT_EQ(ok(R"({"command":"x","cpus":4096})").cpus, std::optional<int64_t>(4096));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","cpus":0})"), "field \"params.cpus\" must be a whole number from 1 to 4096"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","cpus":4097})"), "field \"params.cpus\" must be a whole number from 1 to 4096"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","queue_wait_limit_s":-1})"), "field \"params.queue_wait_limit_s\""));
  const std::string siblings = R"({"command":"x","siblings":[)" + [] {
    std::string s;
    for (int i = 0; i < 65; ++i) s += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
    return s;
  }() + "]}";
  EXPECT_TRUE(contains(error_of(siblings), "field \"params.siblings\" has more than 64 items"));
}

TEST_F(RunParamsTest, NulBytesAreRefused) {
  EXPECT_TRUE(contains(error_of(R"({"command":"echo\u0000rm -rf /"})"), "field \"params.command\" contains a NUL byte"));
  EXPECT_TRUE(contains(error_of(R"({"argv":["ls","a\u0000b"]})"), "field \"params.argv[1]\" contains a NUL byte"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","cwd":"a\u0000"})"), "field \"params.cwd\" contains a NUL byte"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","workspace_key":"\u0000"})"), "field \"params.workspace_key\" contains a NUL byte"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","siblings":["\u0000"]})"), "field \"params.siblings[0]\" contains a NUL byte"));
}

TEST_F(RunParamsTest, EnvNulIsLeftToTheEnvFilter) {
  // The env filter (config/env_filter) drops names and values holding NUL and names them in
  // env_not_forwarded; parsing keeps them so it can say so.
  const RunParams p = ok(R"({"command":"x","env":{"RUST_X":"a\u0000b"}})");
  ASSERT_EQ(p.env.size(), 1u);
  EXPECT_EQ(p.env[0].second, "a\0b"s);
}

TEST_F(RunParamsTest, CommandAndArgvAreExclusive) {
  EXPECT_TRUE(contains(error_of(R"({"command":"ls","argv":["ls"]})"), "give either \"command\" or \"argv\", not both"));
  EXPECT_TRUE(contains(error_of(R"({})"), "missing field \"command\" (or \"argv\")"));
  EXPECT_TRUE(contains(error_of(R"({"argv":[]})"), "missing field \"command\" (or \"argv\")"));
  EXPECT_TRUE(contains(error_of(R"({"command":""})"), "field \"command\" is empty"));
  EXPECT_TRUE(contains(error_of(R"({"argv":["","x"]})"), "field \"argv[0]\" is empty"));
  // An empty argv list beside a command is no argv at all.
  EXPECT_EQ(ok(R"({"command":"ls","argv":[]})").command, std::optional<std::string>("ls"));
}

// Issue 17: an unknown string is not a bad request; the runner refuses the job before start.
TEST_F(RunParamsTest, NetworkAndPlatformValues) {
  const auto unknown = ok(R"({"command":"x","network":"full","platform":"macos"})");
  EXPECT_EQ(unknown.unknown_network, std::optional<std::string>("full"));
  EXPECT_EQ(unknown.unknown_platform, std::optional<std::string>("macos"));
  EXPECT_EQ(unknown.network, Network::kOffline);
  const auto known = ok(R"({"command":"x","network":"outbound","platform":"windows"})");
  EXPECT_FALSE(known.unknown_network || known.unknown_platform);
  EXPECT_EQ(known.network, Network::kOutbound);
}

TEST_F(RunParamsTest, SizeLimit) {
  // command bytes; each argv item + 1; each env pair + 2.
  EXPECT_TRUE(parse(R"({"command":"0123456789"})", 10).ok());
  EXPECT_TRUE(contains(error_of(R"({"command":"0123456789"})", 9), "total 10 bytes, over the runner's limit of 9 bytes"));
  EXPECT_TRUE(parse(R"({"argv":["abc","de"]})", 7).ok());
  EXPECT_TRUE(contains(error_of(R"({"argv":["abc","de"]})", 6), "over the runner's limit"));
  EXPECT_TRUE(parse(R"({"command":"x","env":{"AB":"cd"}})", 7).ok());
  EXPECT_TRUE(contains(error_of(R"({"command":"x","env":{"AB":"cd"}})", 6), "total 7 bytes"));
}

TEST_F(RunParamsTest, TooManyArgvItems) {
  std::string params = R"({"argv":[)";
  for (int i = 0; i <= 65536; ++i) params += i ? ",\"a\"" : "\"a\"";
  params += "]}";
  EXPECT_TRUE(contains(error_of(params, size_t{1} << 30), "field \"params.argv\" has more than 65536 items"));
}

TEST_F(RunParamsTest, MemoryAsNumberOrSize) {
  EXPECT_EQ(ok(R"({"command":"x","memory":536870912})").memory_bytes, std::optional<int64_t>(536870912));
  EXPECT_EQ(ok(R"({"command":"x","memory":"2G"})").memory_bytes, std::optional<int64_t>(int64_t{2} << 30));
  EXPECT_EQ(ok(R"({"command":"x","memory":"512M"})").memory_bytes, std::optional<int64_t>(int64_t{512} << 20));
  EXPECT_EQ(ok(R"({"command":"x","memory":"64k"})").memory_bytes, std::optional<int64_t>(int64_t{64} << 10));
  EXPECT_EQ(ok(R"({"command":"x","memory":"1GiB"})").memory_bytes, std::optional<int64_t>(int64_t{1} << 30));
  EXPECT_EQ(ok(R"({"command":"x","memory":"4096"})").memory_bytes, std::optional<int64_t>(4096));
}

TEST_F(RunParamsTest, BadMemory) {
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":0})"), "field \"params.memory\" must be a positive size"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":-1})"), "field \"params.memory\" must be a positive size"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":"0G"})"), "field \"params.memory\" must be a positive size"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":"2X"})"), "field \"params.memory\": expected a size"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":"-2G"})"), "field \"params.memory\": a size cannot be negative"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":"99999999999G"})"), "field \"params.memory\": size too large"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":true})"), "field \"params.memory\" must be bytes or a size"));
  EXPECT_TRUE(contains(error_of(R"({"command":"x","memory":1.5})"), "field \"params.memory\" must be bytes or a size"));
}

TEST_F(RunParamsTest, ParamsMustBeAnObject) {
  EXPECT_TRUE(contains(error_of("[]"), "\"params\" must be an object"));
  EXPECT_TRUE(contains(error_of("{"), "not valid JSON"));
}

// ---- job references and identify ----

TEST(JobRef, Parses) {
  simdjson::dom::parser parser;
  auto r = parse_job_ref(parser, R"({"job_id":")"s + kJobId + R"(","from_seq":5})", true);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->job_id, kJobId);
  EXPECT_EQ(r->from_seq, 5);
  auto d = parse_job_ref(parser, R"({"job_id":")"s + kJobId + R"("})", true);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->from_seq, 1);
  auto none = parse_job_ref(parser, "{}", false);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->job_id, "");
}

TEST(JobRef, Errors) {
  simdjson::dom::parser parser;
  auto missing = parse_job_ref(parser, "{}", true);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.error().message, "missing field \"params.job_id\""));
  auto bad_id = parse_job_ref(parser, R"({"job_id":"../../etc"})", false);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_TRUE(contains(bad_id.error().message, "\"params.job_id\" is not a job id"));
  // Found by fuzzing: an empty job_id passed as present where one is required.
  auto empty = parse_job_ref(parser, R"({"job_id":""})", true);
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(contains(empty.error().message, "\"params.job_id\" is not a job id"));
  auto empty_optional = parse_job_ref(parser, R"({"job_id":""})", false);
  ASSERT_FALSE(empty_optional.ok());
  auto upper = parse_job_ref(parser, R"({"job_id":"01890A5D-AC96-774B-BCCE-B302099A8057"})", false);
  EXPECT_FALSE(upper.ok());
  auto seq0 = parse_job_ref(parser, R"({"job_id":")"s + kJobId + R"(","from_seq":0})", true);
  ASSERT_FALSE(seq0.ok());
  EXPECT_TRUE(contains(seq0.error().message, "field \"params.from_seq\" must be a whole number from 1"));
}

TEST(JobRef, FromSeqAtTheEdgeOfInt64) {
  simdjson::dom::parser parser;
  const std::string prefix = R"({"job_id":")"s + kJobId + R"(","from_seq":)";
  auto max = parse_job_ref(parser, prefix + "9223372036854775807}", true);
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(max->from_seq, INT64_MAX);
  // 2^63 written as a double is one past INT64_MAX: out of range, not converted (that would be
  // undefined behaviour).
  auto over = parse_job_ref(parser, prefix + "9223372036854775808.0}", true);
  ASSERT_FALSE(over.ok()) << "from_seq became " << over->from_seq;
  EXPECT_TRUE(contains(over.error().message, "params.from_seq"));
  auto far = parse_job_ref(parser, prefix + "1e19}", true);
  EXPECT_FALSE(far.ok());
  auto uint = parse_job_ref(parser, prefix + "9223372036854775808}", true);
  EXPECT_FALSE(uint.ok());
}

// Issue 17: a from_seq that is present must be a whole number from 1; anything else is a
// bad_request naming the field, never read as 0 or 1.
TEST(JobRef, APresentFromSeqThatIsNotAWholeNumberIsRefusedNamingIt) {
  simdjson::dom::parser parser;
  const std::string prefix = R"({"job_id":")"s + kJobId + R"(","from_seq":)";
  for (const std::string bad : {R"("5")", "-1", "1.5", "true", "[1]", R"({"n":1})", "1e300", "9223372036854775808"}) {
    auto r = parse_job_ref(parser, prefix + bad + "}", true);
    ASSERT_FALSE(r.ok()) << bad << " became " << r->from_seq;
    EXPECT_EQ(r.error().code, "bad_request") << bad;
    EXPECT_TRUE(contains(r.error().message, "field \"params.from_seq\"")) << bad << ": " << r.error().message;
  }
}

// The vocabulary: a record's seq, when present, is a u64; anything else (null included) is a
// decode error naming the field, never seq 0.
TEST(Message, ARecordWhoseSeqIsNotAU64IsADecodeError) {
  simdjson::dom::parser parser;
  for (const std::string bad : {R"("7")", "null", "-1", "1.5", "[7]", "9223372036854775808"}) {
    auto m = parse_message(parser, R"({"type":"future_record","seq":)" + bad + "}");
    ASSERT_FALSE(m.ok()) << bad << " became seq " << m->seq;
    EXPECT_EQ(m.error().code, "bad_request") << bad;
    EXPECT_TRUE(contains(m.error().message, "field \"seq\"")) << bad << ": " << m.error().message;
  }
  auto ok = parse_message(parser, R"({"type":"future_record","seq":7})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->seq, 7);
  auto none = parse_message(parser, R"({"type":"accepted","job_id":"x","queue_position":0})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->seq, 0);
}

// Issue 16 item 5: an error reply's code and a refusal's reason are parsed once, into types.
TEST(Message, ErrorCodesAndRefusalReasonsAreTyped) {
  simdjson::dom::parser parser;
  auto stalled = parse_message(parser, R"({"id":2,"error":{"code":"stalled","message":"m"}})");
  ASSERT_TRUE(stalled.ok());
  EXPECT_EQ(stalled->error, ErrorCode::kStalled);
  auto future = parse_message(parser, R"({"id":2,"error":{"code":"future_code","message":"m"}})");
  ASSERT_TRUE(future.ok());
  EXPECT_EQ(future->error, ErrorCode::kOther);
  EXPECT_EQ(future->error_code, "future_code");
  for (ErrorCode c : {ErrorCode::kBadRequest, ErrorCode::kUnauthorized, ErrorCode::kInternal, ErrorCode::kStalled,
                      ErrorCode::kSessionTimeout, ErrorCode::kRunnerDiskFull}) {
    EXPECT_EQ(parse_error_code(to_wire(c)), c) << to_wire(c);
  }
  auto network = parse_message(
      parser, R"({"type":"terminal","job_id":"x","outcome":{"type":"refused_before_start","reason":"network_unsupported"}})");
  ASSERT_TRUE(network.ok());
  EXPECT_EQ(network->outcome.refusal, RefusalReason::kNetworkUnsupported);
  auto unknown = parse_message(
      parser, R"({"type":"terminal","job_id":"x","outcome":{"type":"refused_before_start","reason":"future_refusal"}})");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->outcome.refusal, std::nullopt);
  EXPECT_EQ(unknown->outcome.reason, "future_refusal");
  EXPECT_EQ(refused(RefusalReason::kRunnerFull).refusal, RefusalReason::kRunnerFull);
}

TEST(JobId, Format) {
  EXPECT_TRUE(is_job_id(kJobId));
  EXPECT_FALSE(is_job_id(""));
  EXPECT_FALSE(is_job_id("01890a5d-ac96-774b-bcce-b302099a805"));    // short
  EXPECT_FALSE(is_job_id("01890a5d-ac96-774b-bcce-b302099a80577"));  // long
  EXPECT_FALSE(is_job_id("01890a5dxac96-774b-bcce-b302099a8057"));   // dash
  EXPECT_FALSE(is_job_id("01890a5d-ac96-774b-bcce-b302099a805g"));   // not hex
}

TEST(Identify, Caller) {
  simdjson::dom::parser parser;
  auto ok = parse_identify(parser, R"({"caller":"alice@laptop.example-1_x"})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "alice@laptop.example-1_x");
  auto missing = parse_identify(parser, "{}");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.error().message, "missing field \"params.caller\""));
  EXPECT_FALSE(parse_identify(parser, R"({"caller":""})").ok());
  EXPECT_FALSE(parse_identify(parser, R"({"caller":"a/b"})").ok());
  EXPECT_FALSE(parse_identify(parser, R"({"caller":"a b"})").ok());
  EXPECT_FALSE(parse_identify(parser, R"({"caller":")" + std::string(65, 'a') + "\"}").ok());
  EXPECT_TRUE(parse_identify(parser, R"({"caller":")" + std::string(64, 'a') + "\"}").ok());
}


// (ext) untrusted runs and prepares (docs/change-screen.md).
TEST_F(RunParamsTest, Untrusted) {
  EXPECT_FALSE(ok(R"({"command":"true"})").untrusted);
  EXPECT_TRUE(ok(R"({"command":"true","untrusted":true})").untrusted);
  EXPECT_FALSE(error_of(R"({"command":"true","untrusted":"yes"})").empty());
}

TEST(WorkspaceParams, UntrustedAndScreenBase) {
  simdjson::dom::parser parser;
  const std::string base(40, 'a');
  auto p = parse_workspace_params(parser, R"({"workspace_key":"k","untrusted":true,"screen_base":")" + base + R"("})");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->untrusted);
  EXPECT_EQ(p->screen_base, base);
  auto bad = parse_workspace_params(parser, R"({"untrusted":true,"screen_base":"HEAD~1"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("screen_base"), std::string::npos);
}

}  // namespace
}  // namespace motor::protocol
