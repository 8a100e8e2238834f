// Turns errno into an Error with the failing call named.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "motor/expected.hpp"

namespace motor {

inline Error sys_error(const std::string& what, int err = errno) {
  return Error{"io", what + ": " + std::strerror(err)};
}

}  // namespace motor
