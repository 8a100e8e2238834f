#include "protocol/output_frame.hpp"

#include <iterator>

#include <fmt/format.h>

#include "protocol/base64.hpp"

namespace motor::protocol {
namespace {

constexpr size_t kLengthPrefix = 4;
constexpr size_t kHeaderLength = 4;

void put_be32(char* at, size_t n) {
  at[0] = static_cast<char>(n >> 24);
  at[1] = static_cast<char>(n >> 16);
  at[2] = static_cast<char>(n >> 8);
  at[3] = static_cast<char>(n);
}

// {"id":..,"type":"output","seq":..,"stream":"..": every field before the bytes.
void append_fields(std::string& out, const OutputHead& head) {
  if (head.request_id) fmt::format_to(std::back_inserter(out), "{{\"id\":{},", *head.request_id);
  else out.push_back('{');
  fmt::format_to(std::back_inserter(out), "\"type\":\"output\",\"seq\":{},\"stream\":\"{}\"", head.seq, head.stream);
}

void append_truncated(std::string& out, const OutputHead& head) {
  if (head.truncated_before_seq) fmt::format_to(std::back_inserter(out), ",\"truncated_before_seq\":{}", *head.truncated_before_seq);
}

}  // namespace

void append_json_output(std::string& out, const OutputHead& head, std::string_view bytes) {
  out.reserve(out.size() + 128 + (bytes.size() + 2) / 3 * 4);
  append_fields(out, head);
  out += ",\"bytes\":\"";
  base64_append(out, bytes);
  out.push_back('"');
  append_truncated(out, head);
  out.push_back('}');
}

std::string json_output_frame(const OutputHead& head, std::string_view bytes) {
  std::string out(kLengthPrefix, '\0');
  append_json_output(out, head, bytes);
  put_be32(out.data(), out.size() - kLengthPrefix);
  return out;
}

std::string binary_output_frame_head(const OutputHead& head, size_t byte_count) {
  std::string out;
  out.reserve(160);
  out.resize(kLengthPrefix + 1 + kHeaderLength);
  append_fields(out, head);
  append_truncated(out, head);
  out.push_back('}');
  const size_t header = out.size() - (kLengthPrefix + 1 + kHeaderLength);
  put_be32(out.data(), out.size() - kLengthPrefix + byte_count);
  out[kLengthPrefix] = kBinaryFrameMark;
  put_be32(out.data() + kLengthPrefix + 1, header);
  return out;
}

Expected<std::pair<std::string_view, std::string_view>> split_binary_frame(std::string_view payload) {
  if (payload.size() < 1 + kHeaderLength || payload[0] != kBinaryFrameMark) {
    return make_error("protocol", "a binary frame shorter than its header");
  }
  const auto* p = reinterpret_cast<const unsigned char*>(payload.data()) + 1;
  const size_t header = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | size_t{p[3]};
  payload.remove_prefix(1 + kHeaderLength);
  if (header == 0 || header > payload.size()) {
    return make_error("protocol", fmt::format("a binary frame whose header of {} bytes does not fit its {} bytes", header,
                                              payload.size()));
  }
  return std::pair{payload.substr(0, header), payload.substr(header)};
}

}  // namespace motor::protocol
