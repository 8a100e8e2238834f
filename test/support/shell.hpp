// Shell steps of integration tests (gtest assertions: tests only; the benchmarks share
// runner_harness but not this).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "support/runner_harness.hpp"

namespace motor::test {

// `/bin/sh -ec script` in `cwd`, expected to succeed (a gtest failure names the script if not);
// its stdout.
inline std::string sh(const std::string& cwd, const std::string& script,
                      std::chrono::seconds timeout = std::chrono::seconds(120)) {
  auto r = run_program({"/bin/sh", "-ec", script}, {}, timeout, cwd);
  EXPECT_EQ(r.exit_code, 0) << script << "\n" << r.err;
  return r.out;
}

}  // namespace motor::test
