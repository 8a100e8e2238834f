// Test switches (include/motor/test_switches.hpp) must be unreachable in the runner an operator
// installs: motor-runner refuses every --test-* flag; only motor-runner-testing takes them.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace {

struct Ran {
  int exit_code = -1;
  std::string output;
};

Ran run(const std::string& command) {
  Ran r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(TestSwitches, TheInstalledRunnerRefusesEveryTestFlag) {
  for (const char* flag : {"--test-weaken=seccomp", "--test-allow-destination=198.51.100.0/24", "--test-anything=1"}) {
    const Ran r = run(std::string(MOTOR_RUNNER_BIN) + " " + flag + " print-config");
    EXPECT_EQ(r.exit_code, 64) << flag;
    EXPECT_NE(r.output.find("not built for testing"), std::string::npos) << r.output;
  }
}

TEST(TestSwitches, TheTestingRunnerRefusesUnknownControls) {
  const Ran r = run(std::string(MOTOR_RUNNER_TESTING_BIN) + " --test-weaken=no-such-control print-config");
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.output.find("unknown control no-such-control"), std::string::npos) << r.output;
}

TEST(TestSwitches, TheTestingRunnerTakesADestination) {
  const Ran r = run(std::string(MOTOR_RUNNER_TESTING_BIN) + " --test-allow-destination=198.51.100.0/24 print-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
