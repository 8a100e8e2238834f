// Frames: a 4-byte big-endian length, then that many bytes of one UTF-8 JSON object.
// The length is checked against the limit before anything is buffered or decoded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::protocol {

inline constexpr size_t kMaxFrameBytes = size_t{1} << 20;

// Appends one frame (header + payload) to `out`.
void append_frame(std::string& out, std::string_view payload);
std::string encode_frame(std::string_view payload);

// Reassembles frames from a byte stream that may split or join them arbitrarily.
class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_frame_bytes = kMaxFrameBytes) : max_(max_frame_bytes) {}

  // Appends every complete frame's payload to `frames`. An oversized or empty frame is an error
  // ("bad_request"); after one, the stream is broken and the decoder refuses more input.
  Status feed(std::string_view bytes, std::vector<std::string>& frames);

  // True when a frame has started but not finished (a torn frame if the stream ends now).
  bool mid_frame() const { return header_len_ > 0 || need_ > 0; }
  bool broken() const { return broken_; }

 private:
  size_t max_;
  unsigned char header_[4] = {};
  size_t header_len_ = 0;
  size_t need_ = 0;     // payload bytes still missing for the current frame
  std::string payload_;
  bool broken_ = false;
};

}  // namespace motor::protocol
