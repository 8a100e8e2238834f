#pragma once

#include <string>

#include "motor/expected.hpp"

namespace motor {

// A UUIDv7 (time-ordered: 48 bits of Unix milliseconds, then randomness from getrandom).
Expected<std::string> new_job_id();

}  // namespace motor
