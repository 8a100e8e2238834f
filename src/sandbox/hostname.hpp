// The job's UTS namespace: its own hostname (never the host's).
#pragma once

#include <string>

#include "motor/expected.hpp"

namespace motor::sandbox {

// Letters, digits, '-' and '.', 1..63 bytes.
Status validate_hostname(const std::string& name);

// Child: sethostname and a neutral domain name in the (new) UTS namespace.
int apply_hostname(const std::string& name, const char*& stage);

}  // namespace motor::sandbox
