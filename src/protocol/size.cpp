#include "protocol/size.hpp"

#include <charconv>
#include <limits>

namespace motor::protocol {

Expected<int64_t> parse_size(std::string_view t) {
  const Error expected{"bad_request", "expected a size in bytes such as 512, 64K, 256M or 2G (powers of 1024)"};
  if (!t.empty() && t.front() == '-') return Error{"bad_request", "a size cannot be negative"};
  size_t digits = 0;
  while (digits < t.size() && t[digits] >= '0' && t[digits] <= '9') ++digits;
  if (digits == 0) return expected;
  std::string_view number = t.substr(0, digits);
  std::string_view suffix = t.substr(digits);
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix.front()) {
      case 'k':
      case 'K': shift = 10; break;
      case 'm':
      case 'M': shift = 20; break;
      case 'g':
      case 'G': shift = 30; break;
      default: return expected;
    }
    suffix.remove_prefix(1);
    if (!(suffix.empty() || suffix == "B" || suffix == "iB")) return expected;
  }
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc{} || ptr != number.data() + number.size() || value > (std::numeric_limits<int64_t>::max() >> shift)) {
    return Error{"bad_request", "size too large"};
  }
  return value << shift;
}

}  // namespace motor::protocol
