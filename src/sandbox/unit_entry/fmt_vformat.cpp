// motor-unit-entry is linked statically (CMakeLists.txt), and Debian's libfmt-dev ships only a
// shared library. The entry's code uses one function of libfmt, fmt::vformat; this file, built
// header-only, gives the link that function (an inline definition, emitted here because it is
// used here) under the same name the rest of the entry calls.
#define FMT_HEADER_ONLY 1
#include <fmt/format.h>

#include <string>

namespace motor::unit_entry {

std::string vformat_for_static_link(fmt::string_view format, fmt::format_args args) { return fmt::vformat(format, args); }

}  // namespace motor::unit_entry
