// Test switches (include/motor/test_switches.hpp): a control's name is checked once, where it is
// parsed; a name in the code is checked by the compiler.
#include "motor/test_switches.hpp"

#include <gtest/gtest.h>

namespace motor {
namespace {

// A misspelt name here would not compile (Control's constructor is consteval).
static_assert(Control{"seccomp-mount"}.name() == "seccomp-mount");
static_assert(Control{"empty-root"} != Control{"readonly-root"});

TEST(TestSwitches, EveryListedControlParsesToItself) {
  for (std::string_view name : kWeakenableControls) {
    auto c = Control::parse(name);
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(c->name(), name);
  }
}

TEST(TestSwitches, UnknownControlIsRefused) {
  EXPECT_FALSE(Control::parse("seccomp-mounts"));  // one letter off
  EXPECT_FALSE(Control::parse(""));
  EXPECT_FALSE(Control::parse("Seccomp"));
  EXPECT_FALSE(is_weakenable_control("no-such-control"));
  EXPECT_TRUE(is_weakenable_control("seccomp"));
}

TEST(TestSwitches, OnlyTheParsedControlIsWeakened) {
  auto saved = test_switches().weakened;
  test_switches().weakened = {*Control::parse("pids-limit")};
  EXPECT_TRUE(control_weakened("pids-limit"));
  EXPECT_FALSE(control_weakened("memory-limit"));
  EXPECT_EQ(weakened_control_names(), std::vector<std::string>{"pids-limit"});
  test_switches().weakened = saved;
}

}  // namespace
}  // namespace motor
