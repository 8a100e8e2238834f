// libFuzzer: the frame decoder fed an arbitrary byte stream in arbitrary chunks.
// Input: byte 0 seeds the chunk sizes, byte 1 picks the frame size limit, the rest is the stream.
// Checks: chunking never changes the result (same frames, same error, same torn state as one
// read of the whole stream); every frame is 1..limit bytes; what was delivered plus what is
// pending is exactly the stream; a broken decoder refuses more input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "protocol/frame.hpp"

using motor::fuzz::check;

using motor::protocol::FrameDecoder;

namespace {

struct Result {
  std::vector<std::string> frames;
  bool failed = false;
  bool mid_frame = false;
};

Result decode(std::string_view stream, size_t limit, uint32_t seed) {
  FrameDecoder d(limit);
  Result r;
  uint32_t state = seed;
  while (!stream.empty()) {
    size_t n = stream.size();
    if (seed != 0) {
      state = state * 1103515245u + 12345u;
      // Mostly small chunks (split headers), sometimes big ones (several frames per read).
      n = (state >> 16) % 8 == 0 ? (state >> 8) % 4096 : (state >> 16) % 7;
      n = std::min(stream.size(), n + 1);
    }
    auto st = d.feed(stream.substr(0, n), r.frames);
    stream.remove_prefix(n);
    if (!st) {
      r.failed = true;
      check(d.broken());
      check(st.error().code == "bad_request");
      check(!d.feed("x", r.frames));
      check(!d.feed("", r.frames));
      return r;
    }
    check(!d.broken());
  }
  r.mid_frame = d.mid_frame();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t seed = data[0];
  // Limits from 1 byte to 1 MiB: small ones make oversized frames reachable at fuzz sizes.
  const size_t limit = data[1] == 255 ? motor::protocol::kMaxFrameBytes : size_t{data[1]} + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);

  const Result whole = decode(stream, limit, 0);
  const Result chunked = decode(stream, limit, seed | 1u);
  check(whole.frames == chunked.frames);
  check(whole.failed == chunked.failed);
  if (!whole.failed) check(whole.mid_frame == chunked.mid_frame);

  size_t consumed = 0;
  for (const auto& f : whole.frames) {
    check(!f.empty() && f.size() <= limit);
    const std::string encoded = motor::protocol::encode_frame(f);
    check(stream.substr(consumed, encoded.size()) == encoded);
    consumed += encoded.size();
  }
  if (!whole.failed) check(whole.mid_frame == (consumed != stream.size()));
  return 0;
}
