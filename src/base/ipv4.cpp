#include "base/ipv4.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace motor {

std::optional<Ipv4> parse_ipv4(std::string_view text) {
  Ipv4 out = 0;
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') return std::nullopt;
    const size_t start = i;
    uint32_t v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 3) v = v * 10 + static_cast<uint32_t>(text[i++] - '0');
    if (v > 255 || (i - start > 1 && text[start] == '0')) return std::nullopt;
    out = (out << 8) | v;
    ++parts;
    if (parts < 4) {
      if (i >= text.size() || text[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != text.size()) return std::nullopt;
  return out;
}

std::string format_ipv4(Ipv4 a) {
  return fmt::format("{}.{}.{}.{}", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF, a & 0xFF);
}

Expected<Cidr> parse_cidr(std::string_view text) {
  const auto slash = text.find('/');
  auto addr = parse_ipv4(text.substr(0, slash));
  if (!addr) return make_error("config", fmt::format("\"{}\" is not an IPv4 address or a.b.c.d/n range", text.substr(0, 64)));
  Cidr c;
  c.base = *addr;
  c.prefix = 32;
  if (slash != std::string_view::npos) {
    const std::string_view n = text.substr(slash + 1);
    if (n.empty() || n.size() > 2 || !std::all_of(n.begin(), n.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        (n.size() == 2 && n[0] == '0'))
      return make_error("config", fmt::format("\"{}\": the prefix length must be 0 to 32", text.substr(0, 64)));
    c.prefix = n.size() == 1 ? n[0] - '0' : (n[0] - '0') * 10 + (n[1] - '0');
    if (c.prefix > 32) return make_error("config", fmt::format("\"{}\": the prefix length must be 0 to 32", text.substr(0, 64)));
  }
  const Ipv4 host_bits = Cidr::host_mask(c.prefix);
  if ((c.base & host_bits) != 0)
    return make_error("config", fmt::format("\"{}\" has host bits set; write {}", text.substr(0, 64),
                                            format_cidr({c.base & ~host_bits, c.prefix})));
  return c;
}

std::string format_cidr(const Cidr& c) { return fmt::format("{}/{}", format_ipv4(c.base), c.prefix); }

}  // namespace motor
