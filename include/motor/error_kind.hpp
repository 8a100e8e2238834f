// The internal error codes (Error::code) that code acts on across a module edge, parsed once
// here into a type: the rest are for people and logs. On the wire, protocol::ErrorCode.
#pragma once

#include "motor/expected.hpp"

namespace motor {

enum class ErrorKind {
  kConfig,  // the configuration (or the host it describes) cannot work: sandbox/, config/
  kOther,
};

inline ErrorKind kind_of(const Error& e) { return e.code == "config" ? ErrorKind::kConfig : ErrorKind::kOther; }

}  // namespace motor
