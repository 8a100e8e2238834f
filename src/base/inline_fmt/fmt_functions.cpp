// libfmt's compiled functions, built here from its headers (FMT_HEADER_ONLY), for the programs
// whose start is worth a shared library less: `motor` and `motor-bridge`, which a caller starts for
// every command (linked with --as-needed, they no longer load libfmt.so: 8 page faults and about
// 0.4 ms of each start on session 16's machine), and motor-unit-entry, linked statically, for which
// Debian ships no libfmt.a. Taking each function's address makes this file emit it (as an inline
// function's weak definition), which resolves the calls the project's objects make to libfmt.
// The list is what those programs' objects leave undefined (`nm -D --undefined-only motor | grep
// fmt`); a call to another libfmt function shows up as libfmt.so in `ldd build/ci/motor`, or as an
// undefined symbol in motor-unit-entry's static link.
#define FMT_HEADER_ONLY 1
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace motor::inline_fmt {

struct FmtFunctions {
  std::string (*vformat)(fmt::string_view, fmt::format_args);
  void (*vprint)(fmt::string_view, fmt::format_args);
  void (*vprint_to)(std::FILE*, fmt::string_view, fmt::format_args);
  bool (*is_printable)(uint32_t);
  char (*decimal_point)(fmt::detail::locale_ref);
  fmt::detail::thousands_sep_result<char> (*thousands_sep)(fmt::detail::locale_ref);
  void (*throw_format_error)(const char*);
  fmt::detail::dragonbox::decimal_fp<double> (*to_decimal_double)(double);
  fmt::detail::dragonbox::decimal_fp<float> (*to_decimal_float)(float);
};

extern const FmtFunctions kFmtFunctions;
const FmtFunctions kFmtFunctions{
    &fmt::vformat,
    &fmt::vprint,
    &fmt::vprint,
    &fmt::detail::is_printable,
    &fmt::detail::decimal_point_impl<char>,
    &fmt::detail::thousands_sep_impl<char>,
    &fmt::detail::throw_format_error,
    &fmt::detail::dragonbox::to_decimal<double>,
    &fmt::detail::dragonbox::to_decimal<float>,
};

}  // namespace motor::inline_fmt
