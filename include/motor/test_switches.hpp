// Test-only switches: weaken exactly one control, or allow one test destination, so a test can
// show that the attack the control stops GETS THROUGH without it.
//
// Only motor-runner-testing (the same main.cpp compiled with MOTOR_TESTING) fills these in, from
// `--test-*` command-line flags. motor-runner refuses every `--test-*` flag, and no config key
// reaches them, so in a runner an operator installs they are always empty.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace motor {

// Every control a test may weaken, by the name `--test-weaken=NAME` takes. One entry per control;
// the code that applies the control checks control_weakened(NAME) at the point it applies it.
inline constexpr std::array<std::string_view, 0> kWeakenableControls = {};

struct TestSwitches {
  std::vector<std::string> weakened;              // --test-weaken=NAME (repeatable)
  std::vector<std::string> allowed_destinations;  // --test-allow-destination=CIDR (repeatable)
};

inline TestSwitches& test_switches() {
  static TestSwitches switches;
  return switches;
}

inline bool control_weakened(std::string_view control) {
  const auto& w = test_switches().weakened;
  return std::find(w.begin(), w.end(), control) != w.end();
}

inline bool is_weakenable_control(std::string_view control) {
  return std::find(kWeakenableControls.begin(), kWeakenableControls.end(), control) != kWeakenableControls.end();
}

}  // namespace motor
