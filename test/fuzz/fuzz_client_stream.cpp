// libFuzzer: what the `motor` client decodes from a runner's socket, as Connection::read does it
// (FrameDecoder with the protocol's frame limit, then parse_message on each frame), followed the
// way follow_stream does (the highest seq seen, the first terminal ends the stream).
// Input: byte 0 seeds the read sizes, the rest is the byte stream from the "runner".
// Checks: no crash or sanitizer report; a frame the client cannot read is a protocol error
// (bad_request), never half a message; only a record of type terminal ends the stream; seqs never
// go backwards in the client's view. (An output stream label the client does not know is kept;
// the client sends its bytes to stderr: output_fd_for, unit-tested.)
#include <simdjson.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "protocol/output_frame.hpp"

using motor::fuzz::check;

namespace p = motor::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  if (size < 1) return 0;
  uint32_t state = data[0] | 1u;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  p::FrameDecoder decoder;  // the client's: kMaxFrameBytes
  int64_t last_seq = 0;
  bool ended = false;
  while (!stream.empty() && !ended) {
    state = state * 1103515245u + 12345u;
    const size_t n = std::min(stream.size(), size_t{(state >> 16) % 64 + 1});
    std::vector<std::string> frames;
    auto fed = decoder.feed(stream.substr(0, n), frames);
    stream.remove_prefix(n);
    for (const auto& f : frames) {
      auto m = p::parse_message(parser, f);
      if (!m) {
        check(m.error().code == "bad_request" && !m.error().message.empty());
        continue;  // the client reports a protocol error and stops
      }
      // A binary output frame's raw is its JSON header; any other message's, the whole frame.
      if (!f.empty() && f[0] == p::kBinaryFrameMark) {
        check(m->kind == p::Message::Kind::kRecord && m->type == "output" && f.find(m->raw) != std::string::npos);
      } else {
        check(m->raw == f);
      }
      if (m->kind == p::Message::Kind::kError) check(!m->error_code.empty());
      if (m->kind != p::Message::Kind::kRecord) continue;
      if (m->seq > 0) last_seq = std::max(last_seq, m->seq);
      check(last_seq >= m->seq);
      if (m->type == "terminal") {
        ended = true;
        break;
      }
    }
    if (!fed) {
      check(fed.error().code == "bad_request");
      break;
    }
  }
  return 0;
}
