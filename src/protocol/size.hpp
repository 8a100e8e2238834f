// Sizes as people write them: "512", "64K", "256M", "2G" (powers of 1024; "KB"/"KiB" too).
#pragma once

#include <cstdint>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::protocol {

// Errors ("bad_request") say what a size looks like; callers add where it came from.
Expected<int64_t> parse_size(std::string_view text);

}  // namespace motor::protocol
