#pragma once

namespace motor {
inline constexpr const char* kVersion = "0.1.0";
// Bumped whenever a record or method changes incompatibly.
inline constexpr int kProtocolVersion = 1;
}  // namespace motor
