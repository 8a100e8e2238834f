// `motor-bb-runner gate`: every attack of motor-runner gate's catalogue, each job sent as
// bb_worker sends an action (a Run over the real runner.proto to a real motor-bb-runner, its
// workspace an input root in a build directory), judged from what bb_worker gets back. It must
// pass on this host and it must be able to fail: a config that weakens a control turns that
// attack GOT THROUGH on this path too.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gate/gate_run.hpp"
#include "support/gate_fixture.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

// Attacks on inputs a Run does not carry (bbrunner/gate_transport.cpp says why for each).
const std::set<std::string> kNotApplicable = {"other-caller-workspace", "untrusted-unscreened-job",
                                              "untrusted-code-change",  "env-canaries",
                                              "ssh-auth-sock",          "scan-fifo",
                                              "scan-memory"};
// Host-level skips with this config: outbound is off, no shared caches.
const std::set<std::string> kHostSkips = {"net-outbound-ranges", "net-outbound-host", "net-outbound-ipv6",
                                          "net-outbound-dns-private", "write-caches"};

struct BbGateRun : GateReport {
  CommandResult cmd;
};

class BbGate : public GateTest {
 protected:
  BbGate() : GateTest("motor-bbgate-test") {}

  BbGateRun gate(const std::string& extra_config, const std::vector<std::string>& extra_args = {}) {
    const std::string config = dir_ + "/runner.conf";
    write_file(config, fmt::format("cgroup_parent = {}\n{}", cgroup_parent_, extra_config));
    std::vector<std::string> argv = {MOTOR_BB_RUNNER_BIN, "gate", "--config", config, "--runner", MOTOR_RUNNER_BIN, "--json"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    BbGateRun g;
    g.cmd = run_program(argv, {}, std::chrono::seconds(280));
    static_cast<GateReport&>(g) = parse_gate_report(g.cmd.out);
    return g;
  }

  // No motor-bb-runner, runner or job process and no cgroup of the gate run remains.
  void expect_nothing_left() {
    for (pid_t p : processes_with("motor-gate-")) ADD_FAILURE() << "process " << p << " of the gate run remains";
    const auto cgroups = glob_paths(fmt::format("/sys/fs/cgroup/*/{}*", cgroup_parent_));
    EXPECT_TRUE(cgroups.empty()) << cgroups.front();
  }

  static std::string dump(const BbGateRun& g) { return g.cmd.out.substr(0, 20000) + "\n--- stderr:\n" + g.cmd.err.substr(0, 4000); }

};

TEST_F(BbGate, EveryAttackThroughMotorBbRunnerIsStoppedOrNotApplicable) {
  auto g = gate("");
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 0) << dump(g);
  EXPECT_EQ(g.jobs_through, "motor-bb-runner");
  const auto ids = gate::attack_ids();
  EXPECT_EQ(g.result.size(), ids.size()) << dump(g);
  for (const auto& id : ids) {
    ASSERT_TRUE(g.result.count(id)) << "attack " << id << " missing\n" << dump(g);
    if (kNotApplicable.count(id)) {
      EXPECT_EQ(g.result[id], "skipped") << id << ": " << g.evidence[id];
      EXPECT_NE(g.evidence[id].find("not applicable through motor-bb-runner"), std::string::npos) << g.evidence[id];
    } else if (kHostSkips.count(id)) {
      EXPECT_EQ(g.result[id], "skipped") << id << ": " << g.evidence[id];
    } else {
      EXPECT_EQ(g.result[id], "stopped") << id << ": " << g.evidence[id];
    }
  }
  expect_nothing_left();
}

// The path can fail: with pids_max far above what the gate pushes, the fork bomb sent as an
// action meets no limit, and the gate says so.
TEST_F(BbGate, HugePidsMaxLetsTheForkBombThroughOnThisPathToo) {
  auto g = gate("pids_max = 1000000\n", {"--attack", "fork-bomb,read-shadow"});
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 1) << dump(g);
  EXPECT_EQ(g.result["fork-bomb"], "got_through") << g.evidence["fork-bomb"];
  EXPECT_EQ(g.result["read-shadow"], "stopped") << g.evidence["read-shadow"];
  expect_nothing_left();
}

TEST_F(BbGate, UnknownAttackOrRunnerIsAUsageError) {
  auto unknown = run_program({MOTOR_BB_RUNNER_BIN, "gate", "--attack", "no-such-attack"});
  EXPECT_EQ(unknown.exit_code, 64) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("no attack no-such-attack"), std::string::npos) << unknown.err;
  auto runner = run_program({MOTOR_BB_RUNNER_BIN, "gate", "--runner", "/nonexistent/motor-runner"});
  EXPECT_EQ(runner.exit_code, 64) << runner.out << runner.err;
  EXPECT_NE(runner.err.find("no motor-runner at /nonexistent/motor-runner"), std::string::npos) << runner.err;
}

}  // namespace
}  // namespace motor::test
