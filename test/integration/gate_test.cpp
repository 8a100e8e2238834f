// `motor-runner gate` (issue 5) run for real: host checks, then every attack as a real job through
// a runner the gate starts from MOTOR_RUNNER_BIN with the test's config. It must pass on this
// host, and it must be able to fail: a config that weakens a control (pids_max beyond what the
// gate will push, disk_free_floor = 0) and the test-only --self-test-plant-leak (the gate plants a
// canary where the job can read it) each turn exactly their attack or check red.
#include <dirent.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

// Every attack of the catalogue (src/gate/attacks.cpp); the gate must report each one.
const std::vector<std::string> kAttacks = {
    "read-shadow",    "read-root-home", "read-state-dir", "other-caller-workspace", "write-usr",      "write-etc",
    "write-root",     "fs-dotdot",      "fs-symlink",     "fs-hardlink",            "write-caches",   "mknod",
    "proc-host",      "runner-memory",  "net-host-loopback", "net-outbound",        "dns",            "capabilities",
    "no-new-privs",   "setuid",         "seccomp-mode",   "seccomp-calls",          "ptrace-init",    "keyring",
    "user-namespace", "mount",          "tiocsti",        "hostname",               "write-proc-sys", "write-sys",
    "cgroup-files",   "env-canaries",   "ssh-auth-sock",  "memory-balloon",         "fork-bomb",      "cpuset",
    "daemon",         "timeout"};
// Skipped (host-level) unless the config enables outbound_network; runner_network_test.cpp runs
// them against a test uplink.
const std::vector<std::string> kOutboundAttacks = {"net-outbound-ranges", "net-outbound-host", "net-outbound-ipv6",
                                                   "net-outbound-dns-private"};

struct GateRun {
  CommandResult cmd;
  std::map<std::string, std::string> result;    // attack id -> result
  std::map<std::string, std::string> evidence;  // attack id -> evidence
  std::map<std::string, std::string> checks;    // host check name -> status
  std::string summary_line;
  bool parsed = false;
};

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

class Gate : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "the gate runs as root (it starts a runner)");
    MOTOR_REQUIRE(run_program({"/usr/bin/id", "-u", "motor-job"}).exit_code == 0, "the motor-job account is missing");
    MOTOR_REQUIRE(access("/usr/bin/python3", X_OK) == 0, "the attacks need python3 in the job's toolchain");
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty());
    chmod(dir_.c_str(), 0711);  // jobs reach their workspace below it
    cgroup_parent_ = fmt::format("motor-gate-test-{}", getpid());
  }

  void TearDown() override {
    if (!dir_.empty()) remove_tree(dir_);
  }

  GateRun gate(const std::string& extra_config, const std::vector<std::string>& extra_args = {}) {
    const std::string config = dir_ + "/runner.conf";
    write_file(config, fmt::format("cgroup_parent = {}\n{}", cgroup_parent_, extra_config));
    std::vector<std::string> argv{MOTOR_RUNNER_BIN, "gate", "--config", config, "--state-dir", dir_ + "/state", "--json"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    GateRun g;
    g.cmd = run_program(argv, {}, std::chrono::seconds(600));
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (parser.parse(g.cmd.out).get(root)) return g;
    simdjson::dom::array attacks, checks;
    std::string_view s;
    if (root["attacks"].get_array().get(attacks) || root["host_checks"].get_array().get(checks) ||
        root["summary"]["line"].get_string().get(s)) {
      return g;
    }
    g.summary_line = std::string(s);
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

  // Nothing of a gate run remains: no runner, no job process, no cgroup, no workspace.
  void expect_nothing_left() {
    for (pid_t p : processes_with(dir_)) ADD_FAILURE() << "process " << p << " of the gate run remains";
    const auto cgroups = glob_paths(fmt::format("/sys/fs/cgroup/*/{}*", cgroup_parent_));
    EXPECT_TRUE(cgroups.empty()) << cgroups.front();
    const auto workspaces = glob_paths(dir_ + "/state/workspaces/*/gate-*");
    EXPECT_TRUE(workspaces.empty()) << workspaces.front();
  }

  std::string dir_, cgroup_parent_;
};

std::string dump(const GateRun& g) { return g.cmd.out.substr(0, 20000) + "\n--- stderr:\n" + g.cmd.err.substr(0, 4000); }

// The gate passes on this host with this config: every attack present, none got through, only
// host-level skips (no shared caches are configured).
TEST_F(Gate, PassesOnThisHostAndLeavesNothingBehind) {
  auto g = gate("");
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 0) << dump(g);
  EXPECT_NE(g.summary_line.find("0 got through"), std::string::npos) << g.summary_line;
  for (const auto& id : kAttacks) {
    ASSERT_TRUE(g.result.count(id)) << "attack " << id << " missing\n" << dump(g);
    if (id == "write-caches") {
      EXPECT_EQ(g.result[id], "skipped");
      EXPECT_EQ(g.evidence[id], "no shared caches configured");
    } else {
      EXPECT_EQ(g.result[id], "stopped") << id << ": " << g.evidence[id];
    }
  }
  for (const auto& id : kOutboundAttacks) EXPECT_EQ(g.result[id], "skipped") << id << ": " << g.evidence[id];
  EXPECT_EQ(g.result.size(), kAttacks.size() + kOutboundAttacks.size());
  for (const auto& [name, status] : g.checks) EXPECT_NE(status, "FAIL") << name;
  EXPECT_EQ(g.checks["core scheduling"], "note");
  EXPECT_EQ(g.checks["gate runner's socket"], "ok");
  expect_nothing_left();
}

// The table form says the same and ends with the summary line.
TEST_F(Gate, TableEndsWithTheSummaryLine) {
  const std::string config = dir_ + "/runner.conf";
  write_file(config, fmt::format("cgroup_parent = {}\n", cgroup_parent_));
  auto r = run_program({MOTOR_RUNNER_BIN, "gate", "--config", config}, {}, std::chrono::seconds(600));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CONTROL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no shared caches configured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("{} stopped, 0 got through, {} skipped\n", kAttacks.size() - 1, 1 + kOutboundAttacks.size())),
            std::string::npos)
      << r.out;
  expect_nothing_left();
}

// A config that weakens a control: pids_max far above what the gate will push a host to. The
// fork bomb creates more tasks than the gate's bound without meeting a limit: GOT THROUGH.
TEST_F(Gate, HugePidsMaxLetsTheForkBombThrough) {
  auto g = gate("pids_max = 1000000\n");
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 1) << dump(g);
  EXPECT_EQ(g.result["fork-bomb"], "got_through") << g.evidence["fork-bomb"];
  EXPECT_NE(g.evidence["fork-bomb"].find("no limit hit"), std::string::npos) << g.evidence["fork-bomb"];
  for (const auto& [id, result] : g.result) {
    if (id != "fork-bomb") {
      EXPECT_NE(result, "got_through") << id << ": " << g.evidence[id];
    }
  }
  EXPECT_NE(g.summary_line.find("1 got through"), std::string::npos) << g.summary_line;
  expect_nothing_left();
}

// A config that drops the free-space floor fails its host check (with the fix), and only that.
TEST_F(Gate, NoDiskFloorFailsTheHostCheck) {
  auto g = gate("disk_free_floor = 0\n");
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 1) << dump(g);
  EXPECT_EQ(g.checks["free-space floor"], "FAIL");
  for (const auto& [name, status] : g.checks) {
    if (name != "free-space floor") {
      EXPECT_NE(status, "FAIL") << name;
    }
  }
  EXPECT_NE(g.summary_line.find("0 got through"), std::string::npos) << g.summary_line;
  EXPECT_NE(g.summary_line.find("1 host check failed"), std::string::npos) << g.summary_line;
  expect_nothing_left();
}

// The environment filter cannot be weakened by config (a secret-named variable is never
// forwarded, whatever env_allow says: the config refuses such entries), so the gate's test-only
// switch plants a leak instead: a world-readable canary in the job's workspace. The env-canary
// judge must see it and say GOT THROUGH.
TEST_F(Gate, PlantedCanaryLeakGetsThrough) {
  {
    const std::string config = dir_ + "/refused.conf";
    write_file(config, "env_allow = CC, MY_SECRET_VALUE\n");
    auto r = run_program({MOTOR_RUNNER_BIN, "gate", "--config", config, "--json"});
    EXPECT_EQ(r.exit_code, 78) << r.out << r.err;  // EX_CONFIG: the config refuses it
    EXPECT_NE(r.err.find("MY_SECRET_VALUE"), std::string::npos) << r.err;
  }
  auto g = gate("", {"--self-test-plant-leak"});
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 1) << dump(g);
  EXPECT_EQ(g.result["env-canaries"], "got_through") << g.evidence["env-canaries"];
  EXPECT_NE(g.evidence["env-canaries"].find("GH_TOKEN"), std::string::npos) << g.evidence["env-canaries"];
  for (const auto& [id, result] : g.result) {
    if (id != "env-canaries") {
      EXPECT_NE(result, "got_through") << id << ": " << g.evidence[id];
    }
  }
  expect_nothing_left();
}

}  // namespace
}  // namespace motor::test
