// An output record as one frame, in either of its two forms (docs/protocol.md "output" and
// "Binary output frames"): the exec-remote/v1 JSON record with its bytes in base64, or (ext) the
// binary frame a session gets once it asked for it in runner.hello: a small JSON header, then the
// raw bytes, with no base64 and no JSON string to scan. Both are built whole, length prefix
// included, so the runner sends them without copying them again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "motor/expected.hpp"

namespace motor::protocol {

// The first byte of a binary frame's payload. A JSON frame's first byte is never NUL.
inline constexpr char kBinaryFrameMark = '\0';

struct OutputHead {
  std::optional<int64_t> request_id;  // absent: the record as the job's history keeps it
  int64_t seq = 0;
  std::string_view stream;  // "stdout" or "stderr"
  std::optional<int64_t> truncated_before_seq;
};

// Appends the JSON record {"id":..,"type":"output","seq":..,"stream":..,"bytes":base64} (and
// "truncated_before_seq" when set).
void append_json_output(std::string& out, const OutputHead& head, std::string_view bytes);
// The same record as a whole frame.
std::string json_output_frame(const OutputHead& head, std::string_view bytes);

// The start of a binary output frame carrying `byte_count` raw bytes: the length prefix, the mark,
// the header's 4-byte big-endian length and the header {"id":..,"type":"output","seq":..,
// "stream":..}. The frame ends with the bytes themselves, sent right after it.
std::string binary_output_frame_head(const OutputHead& head, size_t byte_count);

// A binary frame's payload (mark included) as its JSON header and its raw bytes; "protocol" when
// the header's length does not fit the frame.
Expected<std::pair<std::string_view, std::string_view>> split_binary_frame(std::string_view payload);

}  // namespace motor::protocol
