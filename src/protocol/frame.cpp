#include "protocol/frame.hpp"

#include <fmt/format.h>

namespace motor::protocol {

void append_frame(std::string& out, std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  const char header[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                          static_cast<char>(n)};
  out.append(header, 4);
  out.append(payload);
}

std::string encode_frame(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 4);
  append_frame(out, payload);
  return out;
}

Status FrameDecoder::feed(std::string_view bytes, std::vector<std::string>& frames) {
  if (broken_) return make_error("bad_request", "the frame stream is already broken");
  while (!bytes.empty()) {
    if (need_ == 0) {
      const size_t take = std::min(bytes.size(), 4 - header_len_);
      for (size_t i = 0; i < take; ++i) header_[header_len_++] = static_cast<unsigned char>(bytes[i]);
      bytes.remove_prefix(take);
      if (header_len_ < 4) break;
      const size_t len = (size_t{header_[0]} << 24) | (size_t{header_[1]} << 16) | (size_t{header_[2]} << 8) |
                         size_t{header_[3]};
      header_len_ = 0;
      if (len == 0) {
        broken_ = true;
        return make_error("bad_request", "empty frame: a frame must hold one JSON object");
      }
      if (len > max_) {
        broken_ = true;
        return make_error("bad_request",
                          fmt::format("frame of {} bytes exceeds the limit of {} bytes", len, max_));
      }
      need_ = len;
      payload_.clear();
      payload_.reserve(len);
    }
    const size_t take = std::min(bytes.size(), need_);
    payload_.append(bytes.data(), take);
    bytes.remove_prefix(take);
    need_ -= take;
    if (need_ == 0) frames.push_back(std::move(payload_)), payload_ = std::string();
  }
  return {};
}

}  // namespace motor::protocol
