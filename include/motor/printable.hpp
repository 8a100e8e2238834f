// Text a caller chose (a job's command line, a workspace key, a refusal detail) on its way to an
// operator's terminal or log: control characters shown escaped, so a caller cannot send escape
// sequences (colours, cursor moves, title or clipboard writes) to whoever reads it.
#pragma once

#include <string>
#include <string_view>

namespace motor {

// C0 controls (newline too), DEL and the UTF-8 encodings of the C1 controls (U+0080..U+009F)
// become \xNN (each byte), a backslash becomes "\\"; everything else is kept as it is.
inline std::string escape_control_chars(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto hex = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      hex(c);
      hex(static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace motor
