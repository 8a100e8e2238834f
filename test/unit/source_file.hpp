// A file of the source tree (docs, conf, man pages) as text, for the tests that check a
// checked-in copy against what the code generates.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace motor::test {

// MOTOR_SOURCE_DIR, not __FILE__: a compiler cache may make __FILE__ relative.
inline std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::filesystem::path(MOTOR_SOURCE_DIR) / relative);
  EXPECT_TRUE(in) << "cannot read " << relative;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace motor::test
