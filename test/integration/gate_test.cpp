// `motor-runner gate` (issue 5) run for real: host checks, then every attack as a real job through
// a runner the gate starts with the test's config. It must pass on this host, and it must be able
// to fail: each control, weakened alone by motor-runner-testing's --test-weaken (never reachable
// from a config), turns exactly its attacks GOT THROUGH while the attacks beside it stay stopped;
// a config that weakens a control (pids_max beyond what the gate will push, disk_free_floor = 0)
// turns exactly its attack or check red.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gate/attacks.hpp"
#include "gate/probes.hpp"
#include "motor/test_switches.hpp"
#include "support/gate_fixture.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

// Every attack of the catalogue (src/gate/attack_table.cpp); the gate must report each one.
const std::vector<std::string> kAttacks = {
    "read-shadow",    "read-root-home", "read-state-dir", "other-caller-workspace", "write-usr",      "write-etc",
    "write-root",     "fs-dotdot",      "fs-symlink",     "fs-hardlink",            "write-caches",   "mknod",
    "proc-host",      "runner-memory",  "net-host-loopback", "net-outbound",        "dns",            "capabilities",
    "no-new-privs",   "setuid",         "seccomp-mode",   "seccomp-calls",          "ptrace-init",    "keyring",
    "user-namespace", "mount",          "tiocsti",        "hostname",               "sysv-ipc",       "write-proc-sys", "write-sys",
    "cgroup-files",   "env-canaries",   "ssh-auth-sock",  "memory-balloon",         "fork-bomb",      "cpuset",
    "daemon",         "timeout",        "vsock",          "uevent-netlink",         "init-memory",    "pty-exhaust",
    "proc-leaks",     "socket-buffers", "cwd-oracle",     "untrusted-unscreened-job", "untrusted-code-change",
    "scan-fifo",      "scan-memory",    "mount-view"};
// Skipped (host-level) unless the config enables outbound_network; runner_network_test.cpp runs
// them against a test uplink.
const std::vector<std::string> kOutboundAttacks = {"net-outbound-ranges", "net-outbound-host", "net-outbound-ipv6",
                                                   "net-outbound-dns-private"};

struct GateRun : GateReport {
  CommandResult cmd;
};

class Gate : public GateTest {
 protected:
  Gate() : GateTest("motor-gate-test") {}

  // `motor-runner gate --json` with the test's config; `weaken` runs motor-runner-testing with those
  // --test-weaken switches; `wrapper` is a command line the gate runs under (a network namespace).
  GateRun gate(const std::string& extra_config, const std::vector<std::string>& extra_args = {},
               const std::vector<std::string>& weaken = {}, const std::vector<std::string>& wrapper = {}) {
    const std::string config = dir_ + "/runner.conf";
    write_file(config, fmt::format("cgroup_parent = {}\n{}", cgroup_parent_, extra_config));
    std::vector<std::string> argv = wrapper;
    argv.push_back(weaken.empty() ? MOTOR_RUNNER_BIN : MOTOR_RUNNER_TESTING_BIN);
    for (const auto& control : weaken) argv.push_back("--test-weaken=" + control);
    for (const char* a : {"gate", "--config"}) argv.push_back(a);
    for (const auto& a : {config, std::string("--state-dir"), dir_ + "/state", std::string("--json")}) argv.push_back(a);
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    GateRun g;
    g.cmd = run_program(argv, {}, std::chrono::seconds(600));
    static_cast<GateReport&>(g) = parse_gate_report(g.cmd.out);
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

};

std::string dump(const GateRun& g) { return g.cmd.out.substr(0, 20000) + "\n--- stderr:\n" + g.cmd.err.substr(0, 4000); }

// The gate passes on this host with this config (and a shared cache): every attack present and
// stopped.
TEST_F(Gate, PassesOnThisHostAndLeavesNothingBehind) {
  const std::string cache = dir_ + "/cache";
  ASSERT_EQ(mkdir(cache.c_str(), 0777), 0);
  chmod(cache.c_str(), 0777);  // only the read-only bind can stop the job's write
  auto g = gate("cache_paths = " + cache + "\n");
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.cmd.exit_code, 0) << dump(g);
  EXPECT_TRUE(g.passed);
  EXPECT_TRUE(g.weakened.empty());
  EXPECT_EQ(g.summary_line,
            fmt::format("{} stopped, 0 got through, {} skipped", kAttacks.size(), kOutboundAttacks.size()));
  for (const auto& id : kAttacks) {
    ASSERT_TRUE(g.result.count(id)) << "attack " << id << " missing\n" << dump(g);
    EXPECT_EQ(g.result[id], "stopped") << id << ": " << g.evidence[id];
  }
  for (const auto& id : kOutboundAttacks) EXPECT_EQ(g.result[id], "skipped") << id << ": " << g.evidence[id];
  EXPECT_EQ(g.result.size(), kAttacks.size() + kOutboundAttacks.size());
  for (const auto& [name, status] : g.checks) EXPECT_NE(status, "FAIL") << name;
  EXPECT_EQ(g.checks["core scheduling"], "note");
  EXPECT_EQ(g.checks["gate runner's socket"], "ok");
  expect_nothing_left();
}

// The table form (here for two attacks: the JSON run above covers them all) ends with the summary
// line; without cache_paths, write-caches is a host-level skip that does not fail the gate.
TEST_F(Gate, TableEndsWithTheSummaryLine) {
  const std::string config = dir_ + "/runner.conf";
  write_file(config, fmt::format("cgroup_parent = {}\n", cgroup_parent_));
  auto r = run_program({MOTOR_RUNNER_BIN, "gate", "--config", config, "--attack", "read-shadow,write-caches"}, {},
                       std::chrono::seconds(600));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CONTROL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no shared caches configured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("1 stopped, 0 got through, 1 skipped (2 of {} attacks run: --attack)\n",
                                   kAttacks.size() + kOutboundAttacks.size())),
            std::string::npos)
      << r.out;
  expect_nothing_left();
}

// A config that weakens a control: pids_max far above what the gate will push a host to. The
// fork bomb creates more tasks than the gate's bound without meeting a limit: GOT THROUGH.
TEST_F(Gate, HugePidsMaxLetsTheForkBombThrough) {
  auto g = gate("pids_max = 1000000\n", {"--attack", "fork-bomb,cpuset"});
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
  auto g = gate("disk_free_floor = 0\n", {"--attack", "read-shadow"});
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

// The environment filter cannot be weakened by config: an env_allow entry with a secret word is
// refused when the config is loaded (so the env-filter row below needs the test-only switch).
TEST_F(Gate, EnvAllowCannotNameASecret) {
  const std::string config = dir_ + "/refused.conf";
  write_file(config, "env_allow = CC, MY_SECRET_VALUE\n");
  auto r = run_program({MOTOR_RUNNER_BIN, "gate", "--config", config, "--json"});
  EXPECT_EQ(r.exit_code, 78) << r.out << r.err;  // EX_CONFIG: the config refuses it
  EXPECT_NE(r.err.find("MY_SECRET_VALUE"), std::string::npos) << r.err;
}

TEST_F(Gate, UnknownAttackIsAUsageError) {
  auto r = run_program({MOTOR_RUNNER_BIN, "gate", "--attack", "read-shadow,no-such-attack"});
  EXPECT_EQ(r.exit_code, 64) << r.out << r.err;
  EXPECT_NE(r.err.find("no attack no-such-attack"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("read-shadow"), std::string::npos) << r.err;  // the list of attacks
}

// A gate whose runner ran with a weakened control says so on its first and last lines and never
// passes, even when every attack it ran was stopped.
TEST_F(Gate, AWeakenedRunSaysSoAndNeverPasses) {
  const std::string config = dir_ + "/runner.conf";
  write_file(config, fmt::format("cgroup_parent = {}\n", cgroup_parent_));
  auto r = run_program({MOTOR_RUNNER_TESTING_BIN, "--test-weaken=readonly-caches", "gate", "--config", config,
                        "--attack", "read-shadow"},
                       {}, std::chrono::seconds(300));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("!!! TEST BUILD: this runner ran with weakened control readonly-caches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("1 stopped, 0 got through, 0 skipped (1 of {} attacks run: --attack); TEST BUILD, WEAKENED: "
                                   "readonly-caches\n",
                                   kAttacks.size() + kOutboundAttacks.size())),
            std::string::npos)
      << r.out;
  expect_nothing_left();
}

// ---- every control, weakened alone ------------------------------------------------------------
//
// One row per control of include/motor/test_switches.hpp (and a few pairs where two layers hold
// one attack): the gate runs, through motor-runner-testing --test-weaken, the attacks that must
// now GET THROUGH and beside them attacks that share the control's mechanism and must still be
// stopped (so the switch weakened exactly that control). A row runs only those attacks
// (--attack): a full gate per control would cost about 15 s each. docs/server-gate.md has the table.
struct WeakenedRow {
  std::vector<std::string> controls;
  std::vector<std::string> through;  // must report got_through
  std::vector<std::string> stopped;  // must still report stopped
  std::string config = "";           // extra config lines
  bool isolated_network = false;     // run the gate in a network namespace of the test's own
};

void PrintTo(const WeakenedRow& row, std::ostream* os) { *os << fmt::format("--test-weaken={}", fmt::join(row.controls, ",")); }

std::string row_name(const WeakenedRow& row) {
  std::string n = fmt::format("{}", fmt::join(row.controls, "_and_"));
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

const std::vector<WeakenedRow>& weakened_rows() {
  static const std::vector<WeakenedRow> rows = {
      {{"empty-root"},
       {"read-shadow", "read-root-home", "read-state-dir", "other-caller-workspace", "fs-symlink", "fs-hardlink"},
       {"write-root", "fs-dotdot", "write-sys"}},
      {{"readonly-root"}, {"write-root", "write-etc", "fs-dotdot"}, {"write-usr", "read-shadow", "fs-symlink"}},
      {{"readonly-toolchain"}, {"write-usr", "write-etc"}, {"write-root", "fs-hardlink", "read-shadow"}},
      {{"readonly-caches"}, {"write-caches"}, {"write-usr", "write-root"}, "cache_paths = CACHE_DIR\n"},
      {{"no-sys"}, {"write-sys", "cgroup-files"}, {"write-proc-sys", "read-shadow"}},
      {{"fresh-proc"}, {"proc-host", "runner-memory"}, {"write-proc-sys", "daemon", "ptrace-init"}},
      {{"pid-namespace"}, {"proc-host", "runner-memory"}, {"daemon", "timeout", "ptrace-init"}},
      // The end of the PID namespace alone still takes everything the command left.
      {{"cgroup-kill"}, {}, {"daemon", "timeout"}},
      {{"pid-namespace", "cgroup-kill"}, {"daemon", "timeout", "proc-host"}, {"memory-balloon"}},
      {{"network-namespace"}, {"net-host-loopback", "net-outbound", "dns"}, {"hostname", "read-shadow"}, "", true},
      {{"uts-namespace"}, {"hostname"}, {"net-host-loopback", "cgroup-files"}},
      {{"cgroup-namespace"}, {"cgroup-files"}, {"write-sys", "hostname"}},
      {{"ipc-namespace"}, {"sysv-ipc"}, {"hostname", "net-host-loopback"}},
      {{"capabilities"}, {"capabilities"}, {"mknod", "write-proc-sys", "no-new-privs", "hostname"}},
      {{"no-new-privs"}, {"no-new-privs"}, {"setuid", "seccomp-mode", "capabilities"}},
      {{"nosuid"}, {}, {"setuid", "no-new-privs"}},  // no_new_privs alone still holds the setuid attack
      {{"no-new-privs", "nosuid"}, {"no-new-privs", "setuid"}, {"capabilities", "write-usr"}},
      // uid 0 without capabilities cannot enter the 0700 workspace of motor-job: attacks that work
      // in /workspace fail there for that reason and are left out of this row.
      {{"job-account"}, {"write-proc-sys"}, {"capabilities", "read-shadow", "hostname", "write-usr"}},
      {{"job-account", "capabilities"}, {"mknod", "capabilities", "write-proc-sys", "hostname"}, {"seccomp-mode", "mount"}},
      {{"seccomp"},
       {"seccomp-mode", "seccomp-calls", "ptrace-init", "keyring", "user-namespace", "mount", "runner-memory", "tiocsti",
        "vsock", "uevent-netlink"},
       {"cgroup-files", "no-new-privs"}},
      {{"seccomp-keyring"}, {"keyring", "seccomp-calls"}, {"seccomp-mode", "ptrace-init", "user-namespace"}},
      {{"seccomp-ptrace"}, {"ptrace-init", "runner-memory", "seccomp-calls"}, {"keyring", "proc-host"}},
      {{"seccomp-namespaces"}, {"user-namespace", "seccomp-calls"}, {"mount", "keyring"}},
      {{"seccomp-mount"}, {"mount", "seccomp-calls"}, {"cgroup-files", "keyring"}},
      {{"seccomp-tiocsti"}, {"tiocsti", "seccomp-calls"}, {"keyring"}},
      {{"seccomp-vsock"}, {"vsock"}, {"uevent-netlink", "seccomp-calls"}},
      {{"seccomp-uevent"}, {"uevent-netlink"}, {"vsock", "seccomp-calls"}},
      {{"init-nondumpable"}, {"init-memory"}, {"ptrace-init", "proc-host", "env-canaries"}},
      {{"pts-max"}, {"pty-exhaust"}, {"tiocsti"}},
      {{"proc-masks"}, {"proc-leaks"}, {"proc-host", "write-proc-sys"}},
      {{"workspace-names"}, {"mount-view"}, {"other-caller-workspace", "proc-leaks", "init-memory"}},
      {{"socket-buffers"}, {"socket-buffers"}, {"memory-balloon"}},
      {{"cwd-beneath"}, {"cwd-oracle"}, {"fs-symlink"}},
      {{"scan-masks"}, {"scan-fifo"}, {"scan-memory"}},
      {{"helper-cgroup"}, {"scan-memory"}, {"scan-fifo"}},
      {{"env-filter"}, {"env-canaries", "ssh-auth-sock"}, {"read-shadow"}},
      {{"memory-limit"}, {"memory-balloon"}, {"cpuset"}},
      {{"pids-limit"}, {"fork-bomb"}, {"memory-balloon"}},
      {{"cpuset"}, {"cpuset"}, {"memory-balloon"}},
  };
  return rows;
}

// Every control has a row in which it alone, or with the other layer of the same attack, turns
// something GOT THROUGH; every row names known controls and attacks.
TEST(GateWeakenedTable, CoversEveryControl) {
  std::set<std::string> covered;
  for (const auto& row : weakened_rows()) {
    for (const auto& c : row.controls) EXPECT_TRUE(is_weakenable_control(c)) << c;
    if (!row.through.empty()) covered.insert(row.controls.begin(), row.controls.end());
    for (const auto& list : {row.through, row.stopped}) {
      for (const auto& id : list) EXPECT_NE(std::find(kAttacks.begin(), kAttacks.end(), id), kAttacks.end()) << id;
    }
  }
  // The outbound controls' rows need a test uplink: RunnerNetworkWeakened in runner_network_test.cpp.
  for (const char* c : {"outbound-ranges", "outbound-host", "outbound-ipv6", "outbound-dns-filter"}) {
    EXPECT_TRUE(is_weakenable_control(c)) << c;
    covered.insert(c);
  }
  for (std::string_view c : kWeakenableControls) EXPECT_TRUE(covered.count(std::string(c))) << c << " has no row";
}

// The catalogue as data (src/gate/attack_table.cpp): the ids are this test's, each row runs a
// probe and is judged (by its expected lines or its own steps), and every probe file in
// src/gate/probes/ is used, by a row or by a step (the prelude, the second caller's and the
// screen's jobs).
TEST(GateTable, EveryRowIsJudgedAndEveryProbeIsUsed) {
  std::vector<std::string> ids;
  std::set<const gate::Probe*> used = {&gate::probes::prelude, &gate::probes::screen_bundle,
                                       &gate::probes::other_caller_canary};
  for (const auto& a : gate::attack_catalogue()) {
    ids.emplace_back(a.id);
    ASSERT_NE(a.probe, nullptr) << a.id;
    used.insert(a.probe);
    EXPECT_TRUE(a.steps || !a.expects.empty()) << a.id << " is never judged";
    EXPECT_FALSE(a.control.empty() || a.description.empty()) << a.id;
  }
  std::vector<std::string> expected = kAttacks;
  expected.insert(expected.end(), kOutboundAttacks.begin(), kOutboundAttacks.end());
  std::sort(ids.begin(), ids.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ids, expected);
  for (const gate::Probe* p : gate::probes::kAll) EXPECT_TRUE(used.count(p)) << p->file << " is used by no attack";
  EXPECT_EQ(used.size(), std::size(gate::probes::kAll));
}

class GateWeakened : public Gate, public ::testing::WithParamInterface<WeakenedRow> {};

// The host's first IPv4 resolver, as the dns attack reads it.
std::string host_resolver() {
  std::ifstream in("/etc/resolv.conf");
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string key, value;
    if (words >> key >> value && key == "nameserver" && value.find(':') == std::string::npos) return value;
  }
  return "192.0.2.53";
}

TEST_P(GateWeakened, ExactlyItsAttacksGetThrough) {
  const WeakenedRow& row = GetParam();
  std::string config = row.config;
  if (const auto at = config.find("CACHE_DIR"); at != std::string::npos) {
    const std::string cache = dir_ + "/cache";
    ASSERT_EQ(mkdir(cache.c_str(), 0777), 0);
    chmod(cache.c_str(), 0777);  // a writable bind must really let the job write
    config.replace(at, 9, cache);
  }
  std::vector<std::string> wrapper;
  if (row.isolated_network) {
    // The gate, its runner and (with the control weakened) the jobs share a network namespace the
    // test made, with no link outside: the outbound and resolver addresses the attacks try are
    // local to it, so a job that shares it is refused there instead of finding no route.
    const std::string resolver = host_resolver();
    MOTOR_REQUIRE(resolver.rfind("127.", 0) != 0, "the host's resolver is on loopback: the dns attack cannot tell");
    wrapper = {"/usr/bin/unshare", "--net", "--", "/bin/sh", "-ec",
               fmt::format("ip link set lo up; ip link add gate0 type veth peer name gate1; ip link set gate0 up; "
                           "ip addr add 192.0.2.1/32 dev gate0; ip addr add {}/32 dev gate0; "
                           "ip -6 addr add 2001:db8::1/128 dev gate0 nodad; exec \"$@\"",
                           resolver),
               "sh"};
  }
  std::vector<std::string> attacks = row.through;
  attacks.insert(attacks.end(), row.stopped.begin(), row.stopped.end());
  auto g = gate(config, {"--attack", fmt::format("{}", fmt::join(attacks, ","))}, row.controls, wrapper);
  ASSERT_TRUE(g.parsed) << dump(g);
  EXPECT_EQ(g.weakened, row.controls);
  EXPECT_FALSE(g.passed);
  EXPECT_EQ(g.cmd.exit_code, 1) << dump(g);
  EXPECT_EQ(g.result.size(), attacks.size()) << dump(g);
  for (const auto& id : row.through) EXPECT_EQ(g.result[id], "got_through") << id << ": " << g.evidence[id];
  for (const auto& id : row.stopped) EXPECT_EQ(g.result[id], "stopped") << id << ": " << g.evidence[id];
  expect_nothing_left();
}

INSTANTIATE_TEST_SUITE_P(EveryControl, GateWeakened, ::testing::ValuesIn(weakened_rows()),
                         [](const auto& p) { return row_name(p.param); });

}  // namespace
}  // namespace motor::test
