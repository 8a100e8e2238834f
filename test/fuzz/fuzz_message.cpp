// libFuzzer: what the client decodes from a runner (parse_message), and the encoders that the
// runner's replies are made of.
// Checks: no crash or sanitizer report; a decoded record encodes back to one that decodes the
// same; any bytes written as a JSON string give valid JSON; base64 round-trips; sizes parse
// without overflow.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "protocol/base64.hpp"
#include "protocol/json_writer.hpp"
#include "protocol/messages.hpp"
#include "protocol/size.hpp"

using motor::fuzz::check;

namespace p = motor::protocol;

namespace {

bool same_outcome(const p::Outcome& a, const p::Outcome& b) {
  return a.kind == b.kind && a.code == b.code && a.signal == b.signal && a.reason == b.reason;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  auto m = p::parse_message(parser, bytes);
  if (!m) check(m.error().code == "bad_request");
  if (m && m->kind == p::Message::Kind::kRecord && m->type == "output") {
    const std::string again = p::encode_output(m->seq, "stdout", m->bytes);
    auto m2 = p::parse_message(parser, again);
    check(m2 && m2->bytes == m->bytes && m2->seq == m->seq);
  }
  if (m && m->kind == p::Message::Kind::kRecord && m->type == "terminal") {
    p::TerminalRecord t;
    t.job_id = m->job_id;
    t.seq = m->seq;
    t.outcome = m->outcome;
    if (m->killed) t.killed = p::parse_kill_reason(*m->killed);
    t.refusal_detail = m->refusal_detail;
    const std::string again = p::encode_terminal(t);
    auto m2 = p::parse_message(parser, again);
    check(m2.ok());
    check(m2->type == "terminal" && m2->seq == m->seq);
    // The writer replaces invalid UTF-8, but parse_message only accepts valid UTF-8: strings
    // come back unchanged.
    check(m2->job_id == m->job_id && m2->refusal_detail == m->refusal_detail);
    if (t.killed) check(m2->killed == m->killed);  // a reason the runner gives comes back unchanged
    if (m->outcome.kind != p::Outcome::Kind::kOutcomeUnknown) check(same_outcome(m2->outcome, m->outcome));
  }

  // Any bytes as a JSON string (and in an error reply) are valid JSON.
  std::string json;
  p::append_json_string(json, bytes);
  simdjson::dom::parser check_parser;
  std::string_view decoded;
  check(check_parser.parse(json).get_string().get(decoded) == simdjson::SUCCESS);
  if (simdjson::validate_utf8(bytes.data(), bytes.size())) {
    check(decoded == bytes);
  }
  auto e = p::parse_message(parser, p::encode_error(1, "bad_request", bytes));
  check(e && e->kind == p::Message::Kind::kError && e->error_message == decoded);

  // base64 both ways.
  const std::string b64 = p::base64_encode(bytes);
  auto back = p::base64_decode(b64);
  check(back && *back == bytes);
  if (auto d = p::base64_decode(bytes)) {
    size_t padding = 0;
    if (size >= 1 && bytes[size - 1] == '=') ++padding;
    if (size >= 2 && bytes[size - 2] == '=') ++padding;
    check(size % 4 == 0 && d->size() == size / 4 * 3 - padding);
  }

  // Sizes.
  auto s = p::parse_size(bytes);
  if (s) check(*s >= 0);
  return 0;
}
