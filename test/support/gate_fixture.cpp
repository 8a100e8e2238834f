#include "support/gate_fixture.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <simdjson.h>

#include "support/runner_harness.hpp"

namespace motor::test {

GateReport parse_gate_report(const std::string& json) {
  GateReport g;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json).get(root)) return g;
  simdjson::dom::array attacks, checks, weakened;
  std::string_view s;
  if (root["attacks"].get_array().get(attacks) || root["host_checks"].get_array().get(checks) ||
      root["summary"]["line"].get_string().get(s) || root["weakened_controls"].get_array().get(weakened) ||
      root["summary"]["passed"].get_bool().get(g.passed)) {
    return g;
  }
  g.summary_line = std::string(s);
  if (!root["jobs_through"].get_string().get(s)) g.jobs_through = std::string(s);
  for (auto w : weakened) {
    std::string_view name;
    if (w.get_string().get(name)) return g;
    g.weakened.emplace_back(name);
  }
  for (auto a : attacks) {
    std::string_view id, result, evidence;
    if (a["id"].get_string().get(id) || a["result"].get_string().get(result) || a["evidence"].get_string().get(evidence)) {
      return g;
    }
    g.result[std::string(id)] = std::string(result);
    g.evidence[std::string(id)] = std::string(evidence);
  }
  for (auto c : checks) {
    std::string_view name, status;
    if (c["name"].get_string().get(name) || c["status"].get_string().get(status)) return g;
    g.checks[std::string(name)] = std::string(status);
  }
  g.parsed = true;
  return g;
}

void GateTest::SetUp() {
  MOTOR_REQUIRE(geteuid() == 0, "the gate runs as root (it starts a runner)");
  MOTOR_REQUIRE(run_program({"/usr/bin/id", "-u", "motor-job"}).exit_code == 0, "the motor-job account is missing");
  MOTOR_REQUIRE(access("/usr/bin/python3", X_OK) == 0, "the attacks need python3 in the job's toolchain");
  dir_ = make_temp_dir();
  ASSERT_FALSE(dir_.empty());
  chmod(dir_.c_str(), 0711);
  cgroup_parent_ = fmt::format("{}-{}", cgroup_prefix_, getpid());
}

void GateTest::TearDown() {
  if (!dir_.empty()) remove_tree(dir_);
}

}  // namespace motor::test
