// One probe of the gate: a script a job runs (src/gate/probes/<name>.py or .sh), embedded into
// the binary at build time (cmake/embed_probes.cmake generates gate/probes.hpp).
#pragma once

#include <string_view>

namespace motor::gate {

struct Probe {
  std::string_view file;  // "read-shadow.py"
  std::string_view text;
  // python3 -c (after the prelude and the attack's values), or /bin/sh -c with arguments.
  constexpr bool python() const { return file.ends_with(".py"); }
};

}  // namespace motor::gate
