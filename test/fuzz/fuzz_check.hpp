// What every fuzz target asserts with: a broken invariant aborts, which libFuzzer reports as a
// crash and saves the input.
#pragma once

#include <cstdlib>

namespace motor::fuzz {

inline void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace motor::fuzz
