// What the gate tests share (`motor-runner gate`, `motor-bb-runner gate`): the host they need, a
// directory and cgroup parent of their own, and the JSON report (docs/server-gate.md, "Reading
// the report") as they read it.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace motor::test {

struct GateReport {
  std::map<std::string, std::string> result;    // attack id -> result
  std::map<std::string, std::string> evidence;  // attack id -> evidence
  std::map<std::string, std::string> checks;    // host check name -> status
  std::vector<std::string> weakened;            // weakened_controls
  std::string summary_line;
  std::string jobs_through;                     // "" without a transport
  bool passed = false;
  bool parsed = false;                          // false: not the report's shape (the other fields are partial)
};

GateReport parse_gate_report(const std::string& json);

// Root, the job account and python3 (the probes'), or the test is skipped (failed under CI=true);
// `dir_` a temporary directory (0711: jobs reach workspaces below it), removed after the test;
// `cgroup_parent_` the prefix and the test's pid.
class GateTest : public ::testing::Test {
 protected:
  explicit GateTest(std::string cgroup_prefix) : cgroup_prefix_(std::move(cgroup_prefix)) {}
  void SetUp() override;
  void TearDown() override;
  std::string dir_, cgroup_parent_;

 private:
  std::string cgroup_prefix_;
};

}  // namespace motor::test
