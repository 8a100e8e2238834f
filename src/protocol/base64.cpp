#include "protocol/base64.hpp"

#include <array>
#include <cstdint>

namespace motor::protocol {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_reverse() {
  std::array<int8_t, 256> r{};
  for (auto& v : r) v = -1;
  for (int i = 0; i < 64; ++i) r[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return r;
}
constexpr auto kReverse = make_reverse();

// Two output characters per lookup (12 bits of input): half the table reads of one per 6 bits.
constexpr std::array<std::array<char, 2>, 4096> make_pairs() {
  std::array<std::array<char, 2>, 4096> t{};
  for (int i = 0; i < 4096; ++i) t[static_cast<size_t>(i)] = {kAlphabet[i >> 6], kAlphabet[i & 63]};
  return t;
}
constexpr auto kPairs = make_pairs();

}  // namespace

void base64_append(std::string& out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  size_t at = out.size();
  out.resize(at + (n + 2) / 3 * 4);
  char* o = out.data() + at;
  for (; n >= 3; n -= 3, p += 3, o += 4) {
    const uint32_t v = (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
    const auto& hi = kPairs[v >> 12];
    const auto& lo = kPairs[v & 4095];
    o[0] = hi[0];
    o[1] = hi[1];
    o[2] = lo[0];
    o[3] = lo[1];
  }
  if (n > 0) {
    const uint32_t v = (uint32_t{p[0]} << 16) | (n == 2 ? uint32_t{p[1]} << 8 : 0);
    *o++ = kAlphabet[(v >> 18) & 63];
    *o++ = kAlphabet[(v >> 12) & 63];
    *o++ = n == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    *o++ = '=';
  }
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  base64_append(out, bytes);
  return out;
}

// Every group but the last has no padding: four table lookups, one check of all four (any
// character outside the alphabet maps to -1, whose sign bit survives the OR), three bytes written
// into a buffer sized once. Output records are decoded here at the client's full rate.
std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  if (text.empty()) return std::string();
  const auto* in = reinterpret_cast<const unsigned char*>(text.data());
  const size_t groups = text.size() / 4;
  std::string out;
  out.resize(groups * 3);
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  for (size_t g = 0; g + 1 < groups; ++g, in += 4, o += 3) {
    const int32_t a = kReverse[in[0]], b = kReverse[in[1]], c = kReverse[in[2]], d = kReverse[in[3]];
    if ((a | b | c | d) < 0) return std::nullopt;
    const uint32_t w = (static_cast<uint32_t>(a) << 18) | (static_cast<uint32_t>(b) << 12) |
                       (static_cast<uint32_t>(c) << 6) | static_cast<uint32_t>(d);
    o[0] = static_cast<unsigned char>(w >> 16);
    o[1] = static_cast<unsigned char>(w >> 8);
    o[2] = static_cast<unsigned char>(w);
  }
  // The last group: "xx==", "xxx=" or "xxxx".
  int v[4];
  int pad = 0;
  for (int j = 0; j < 4; ++j) {
    const unsigned char c = in[j];
    if (c == '=' && j >= 2) {
      v[j] = 0;
      ++pad;
      continue;
    }
    if (pad > 0) return std::nullopt;  // data after padding
    v[j] = kReverse[c];
    if (v[j] < 0) return std::nullopt;
  }
  const uint32_t w = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                     (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
  o[0] = static_cast<unsigned char>(w >> 16);
  o[1] = static_cast<unsigned char>(w >> 8);
  o[2] = static_cast<unsigned char>(w);
  out.resize(out.size() - static_cast<size_t>(pad));
  return out;
}

}  // namespace motor::protocol
