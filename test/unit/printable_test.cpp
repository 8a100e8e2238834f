// Callers' text on its way to an operator's terminal or log (issue 15): control characters escaped.
#include <gtest/gtest.h>

#include "motor/printable.hpp"

namespace motor {
namespace {

TEST(EscapeControlChars, EscapeSequencesAreShownNotSent) {
  EXPECT_EQ(escape_control_chars("make \x1b[2J\x1b]0;pwned\x07 all"), "make \\x1b[2J\\x1b]0;pwned\\x07 all");
  EXPECT_EQ(escape_control_chars("a\nb\rc\td\x7f"), "a\\x0ab\\x0dc\\x09d\\x7f");
  EXPECT_EQ(escape_control_chars("back\\slash"), "back\\\\slash");  // so an escape cannot be faked
  EXPECT_EQ(escape_control_chars("\xc2\x9b" "31m"), "\\xc2\\x9b31m");  // U+009B, the 8-bit CSI
}

TEST(EscapeControlChars, PrintableTextIsKept) {
  EXPECT_EQ(escape_control_chars("cargo test -p motor --features=x"), "cargo test -p motor --features=x");
  EXPECT_EQ(escape_control_chars("caf\xc3\xa9 \xe2\x9c\x93 \xc2\xa0"), "caf\xc3\xa9 \xe2\x9c\x93 \xc2\xa0");
  EXPECT_EQ(escape_control_chars(""), "");
}

}  // namespace
}  // namespace motor
