// Sandboxes built ahead of their jobs (src/runner/sandbox_pool.hpp): which job may take one
// (sandbox::late_binds), motor-init waiting for its command (--await-command), and jobs through a
// real runner that take them: each in its own workspace, directory and environment, each sandbox
// used once, each job in its own cgroup, nothing left when the runner stops.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "sandbox/late_binds.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

// ---- which job may take a sandbox built ahead ----

class LateBinds : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    for (const char* d : {"/ws", "/tmpdir", "/other"}) ASSERT_EQ(mkdir((dir_ + d).c_str(), 0755), 0);
    built_.workspace = {"", "/workspace"};
    built_.workspace_later = true;
    built_.uid = built_.gid = 4242;
    built_.init_path = "/usr/bin/true";
  }
  void TearDown() override { remove_tree(dir_); }
  sandbox::SandboxConfig job() const {
    sandbox::SandboxConfig j = built_;
    j.workspace.source = dir_ + "/ws";
    j.workspace_later = false;
    return j;
  }
  std::string dir_;
  sandbox::SandboxConfig built_;
};

TEST_F(LateBinds, AJobThatDiffersOnlyInItsWorkspaceGetsItBoundAtItsMountPoint) {
  auto binds = sandbox::late_binds(built_, job());
  ASSERT_TRUE(binds.ok()) << binds.error().message;
  ASSERT_EQ(binds->size(), 1u);
  EXPECT_EQ((*binds)[0].source, dir_ + "/ws");
  EXPECT_EQ((*binds)[0].target, "/workspace");
  EXPECT_EQ((*binds)[0].attr_set, sandbox::workspace_bind_attrs());
}

TEST_F(LateBinds, ASandboxBuiltAheadHasAnEmptyMountPointForItsWorkspaceAndNoBind) {
  auto plan = sandbox::plan_sandbox(built_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  int at_workspace = 0;
  for (const auto& op : plan->mounts.ops) {
    if (op.target != "/workspace") continue;
    ++at_workspace;
    EXPECT_EQ(op.kind, sandbox::MountOpKind::kDirectory);
  }
  EXPECT_EQ(at_workspace, 1);
  built_.workspace_later = false;
  EXPECT_FALSE(sandbox::plan_sandbox(built_).ok()) << "a sandbox without a workspace source was planned";
}

TEST_F(LateBinds, AHostTmpIsBoundOverTheTmpfs) {
  auto j = job();
  j.tmp_source = dir_ + "/tmpdir";
  auto binds = sandbox::late_binds(built_, j);
  ASSERT_TRUE(binds.ok()) << binds.error().message;
  ASSERT_EQ(binds->size(), 2u);
  EXPECT_EQ((*binds)[1].source, dir_ + "/tmpdir");
  EXPECT_EQ((*binds)[1].target, "/tmp");
}

TEST_F(LateBinds, AnyOtherDifferenceBuildsTheJobItsOwnSandbox) {
  auto other_account = job();
  other_account.uid = 4243;
  EXPECT_FALSE(sandbox::late_binds(built_, other_account).ok());
  auto sibling = job();
  sibling.read_only.push_back({dir_ + "/other", "/siblings/other"});
  EXPECT_FALSE(sandbox::late_binds(built_, sibling).ok());
  auto outbound = job();
  outbound.network.emplace();
  EXPECT_FALSE(sandbox::late_binds(built_, outbound).ok());
  auto toolchain = job();
  toolchain.toolchain.push_back({"/opt/rust"});
  EXPECT_FALSE(sandbox::late_binds(built_, toolchain).ok());
  auto tmp_size = job();
  tmp_size.tmp_size_bytes /= 2;
  EXPECT_FALSE(sandbox::late_binds(built_, tmp_size).ok());
}

TEST_F(LateBinds, AMountInsideTheWorkspaceWouldBeHiddenSoNoSandboxIsTaken) {
  built_.writable.push_back({dir_ + "/other", "/workspace/target"});
  EXPECT_FALSE(sandbox::late_binds(built_, job()).ok());
}

TEST_F(LateBinds, AWorkspaceThatIsASymlinkIsRefused) {
  ASSERT_EQ(symlink((dir_ + "/ws").c_str(), (dir_ + "/link").c_str()), 0);
  auto j = job();
  j.workspace.source = dir_ + "/link";
  EXPECT_FALSE(sandbox::late_binds(built_, j).ok());
}

// ---- motor-init --await-command ----

struct InitRun {
  int status = -1;
  std::string out;
};

// motor-init --await-command with `gate` written to its fd 0 (then EOF), outside any sandbox.
InitRun run_awaiting_init(const std::string& gate) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    execl(MOTOR_INIT_BIN, "motor-init", "--await-command", static_cast<char*>(nullptr));
    _exit(99);
  }
  close(in[0]);
  close(out[1]);
  (void)!write(in[1], gate.data(), gate.size());
  close(in[1]);
  InitRun r;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) r.out.append(buf, static_cast<size_t>(n));
  close(out[0]);
  waitpid(pid, &r.status, 0);
  return r;
}

TEST(MotorInitAwaitingItsCommand, RunsTheCommandWithItsArgumentsEnvironmentAndDirectory) {
  const std::string message = sandbox::init_command_message(
      {"motor-init", "--", "/bin/sh", "-c", "echo \"[$0][$1][$FOO][$PWD]\"; exit 3", "", "b c"},
      {"FOO=bar", "PATH=/usr/bin:/bin"}, "/tmp");
  auto r = run_awaiting_init(message);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.status;
  EXPECT_EQ(WEXITSTATUS(r.status), 3) << r.out;
  EXPECT_EQ(r.out, "[][b c][bar][/tmp]\n");
}

TEST(MotorInitAwaitingItsCommand, FindsTheCommandOnTheMessagesPath) {
  auto r = run_awaiting_init(sandbox::init_command_message({"motor-init", "--", "echo", "found"}, {"PATH=/bin"}, "/"));
  EXPECT_EQ(r.out, "found\n");
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
}

TEST(MotorInitAwaitingItsCommand, AShutGateOrAMalformedMessageRunsNothing) {
  const std::string good = sandbox::init_command_message({"motor-init", "--", "/bin/echo", "ran"}, {}, "/");
  for (const std::string& gate : {std::string(), std::string("g"), std::string("x") + good.substr(1),
                                  good.substr(0, good.size() - 3)}) {
    auto r = run_awaiting_init(gate);
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 125) << r.out;
    EXPECT_EQ(r.out.find("ran"), std::string::npos);
  }
}

TEST(MotorInitAwaitingItsCommand, TheMessageCannotAskForAnotherGate) {
  auto r = run_awaiting_init(sandbox::init_command_message({"motor-init", "--gate", "--", "/bin/echo", "ran"}, {}, "/"));
  EXPECT_EQ(WEXITSTATUS(r.status), 127);
  EXPECT_EQ(r.out.find("ran"), std::string::npos);
}

TEST(MotorInitAwaitingItsCommand, AMissingDirectoryIsSaidAndNothingRuns) {
  auto r = run_awaiting_init(sandbox::init_command_message({"motor-init", "--", "/bin/echo", "ran"}, {}, "/nonexistent-dir"));
  EXPECT_EQ(WEXITSTATUS(r.status), 127);
  EXPECT_NE(r.out.find("cannot enter the working directory /nonexistent-dir"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran"), std::string::npos);
}

// ---- jobs through a runner that builds sandboxes ahead ----

class SandboxPool : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests run real jobs and need root");
    runner_ = std::make_unique<RunnerProcess>("sandbox_pool_size = 1\npids_max = 321\ndefault_memory = 300M\n");
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override {
    if (!marker_.empty()) {
      for (pid_t p : processes_with(marker_)) kill(p, SIGKILL);
    }
    runner_.reset();
  }
  uint64_t started_in_pool() {
    return std::stoull(json_field(runner_status(*runner_), "/result/jobs_started_in_sandboxes_ready"));
  }
  // Until a sandbox waits (it is built as the runner starts and as each job ends).
  bool wait_until_ready() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (json_field(runner_status(*runner_), "/result/sandboxes_ready") != "0") return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  std::unique_ptr<RunnerProcess> runner_;
  std::string marker_;
};

TEST_F(SandboxPool, AJobRunsInItsOwnWorkspaceDirectoryAndEnvironment) {
  ASSERT_EQ(runner_->client({"run", "-w", "k", "--no-sync", "--", "true"}).exit_code, 0);  // makes the workspace
  const std::string ws = runner_->workspace("k");
  ASSERT_EQ(mkdir((ws + "/sub").c_str(), 0777), 0);
  write_file(ws + "/sub/input.txt", "from the host\n");
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  const uint64_t before = started_in_pool();
  auto r = runner_->client({"run", "-w", "k", "--no-sync", "--env", "LANG=C", "-c",
                            "cd sub && cat input.txt && echo \"$LANG $HOME\" && id -un && echo out > /workspace/written.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err << runner_->log();
  EXPECT_EQ(r.out, "from the host\nC /workspace\nmotor-job\n");
  EXPECT_EQ(read_file(ws + "/written.txt"), "out\n");
  EXPECT_EQ(started_in_pool(), before + 1) << "the job built its own sandbox";
}

TEST_F(SandboxPool, EachSandboxServesOneJob) {
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  const uint64_t before = started_in_pool();
  auto first = runner_->client({"run", "--no-sync", "-c", "echo left > /tmp/left-behind; echo $$ > /dev/null"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  auto second = runner_->client({"run", "--no-sync", "-c", "cat /tmp/left-behind 2>&1; ls -A /tmp | wc -l"});
  EXPECT_EQ(started_in_pool(), before + 2) << runner_->log();
  EXPECT_NE(second.out.find("No such file"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("\n0\n"), std::string::npos) << second.out;
}

// The sandbox was built in the pool's cgroup: every process of the job must be in the job's own
// (made by the job starter, with the job's limits), in every hierarchy, or its limits and its
// kill would not reach it; once the job has ended its cgroup is gone.
TEST_F(SandboxPool, AJobsProcessesAreInTheJobsCgroupEverywhere) {
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  const uint64_t before = started_in_pool();
  marker_ = unique_marker();
  RawClient c(runner_->socket());
  c.send_frame(fmt::format(R"({{"id":1,"method":"exec.run","params":{{"command":"sleep 3600.{}"}}}})", marker_));
  std::string job_id;
  while (auto frame = c.read_frame()) {
    job_id = json_field(*frame, "/job_id");
    if (!job_id.empty() && job_id != "<none>") break;
  }
  ASSERT_FALSE(job_id.empty());
  std::vector<pid_t> pids;
  for (int i = 0; i < 500 && pids.empty(); ++i) {
    pids = processes_with("3600." + marker_);
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(pids.empty());  // the shell and its sleep
  EXPECT_EQ(started_in_pool(), before + 1);
  for (pid_t pid : pids) {
    std::ifstream cgroups(fmt::format("/proc/{}/cgroup", pid));
    int lines = 0;
    for (std::string line; std::getline(cgroups, line);) {
      if (line.find(runner_->cgroup_parent()) == std::string::npos) continue;  // hierarchies Motor does not use
      ++lines;
      EXPECT_TRUE(line.ends_with("/" + runner_->cgroup_parent() + "/job-" + job_id)) << line;
    }
    EXPECT_GE(lines, 1);
  }
  const std::string job_cgroup = "/" + runner_->cgroup_parent() + "/job-" + job_id;
  for (const auto& [control, limit] : {std::pair{"pids.max", "321"}, {"memory.limit_in_bytes", "314572800"},
                                       {"memory.max", "314572800"}}) {
    for (const auto& path : glob_paths("/sys/fs/cgroup/*" + job_cgroup + "/" + control)) {
      EXPECT_EQ(read_file(path), std::string(limit) + "\n") << path;
    }
  }
  EXPECT_FALSE(glob_paths("/sys/fs/cgroup/*" + job_cgroup + "/pids.max").empty() &&
               glob_paths("/sys/fs/cgroup" + job_cgroup + "/pids.max").empty())
      << "the job's cgroup has no pids limit";
  c.send_frame(fmt::format(R"({{"id":2,"method":"exec.cancel","params":{{"job_id":"{}"}}}})", job_id));
  while (auto frame = c.read_frame()) {
    if (json_field(*frame, "/type") == "terminal") break;
  }
  EXPECT_TRUE(glob_paths("/sys/fs/cgroup/*" + job_cgroup).empty() && glob_paths("/sys/fs/cgroup" + job_cgroup).empty())
      << "the job's cgroup outlived its terminal record";
}

TEST_F(SandboxPool, NothingIsLeftOnceTheRunnerStops) {
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  auto r = runner_->client({"run", "--no-sync", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  const pid_t waiting = helper_of(runner_->pid(), "motor-init");
  ASSERT_GT(waiting, 0);
  ASSERT_EQ(runner_->stop(), 0) << runner_->log();
  EXPECT_TRUE(glob_paths("/sys/fs/cgroup/*/" + runner_->cgroup_parent()).empty())
      << "the cgroup parent and the pool's cgroup are removed";
  EXPECT_NE(access(fmt::format("/proc/{}", waiting).c_str(), F_OK), 0) << "the waiting motor-init outlived the runner";
}

TEST_F(SandboxPool, AfterKillNineTheWaitingSandboxGoesAndTheNextStartRemovesItsCgroup) {
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  const pid_t old_runner = runner_->pid();
  const pid_t waiting = helper_of(old_runner, "motor-init");
  ASSERT_GT(waiting, 0);
  runner_->kill9();
  // Its gate's pipe is at EOF: motor-init exits without running anything (and init reaps it).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (access(fmt::format("/proc/{}", waiting).c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(access(fmt::format("/proc/{}", waiting).c_str(), F_OK), 0) << "the waiting motor-init outlived its runner";
  const std::string old_pool = fmt::format("/sys/fs/cgroup/*/{}/sandbox-pool-{}", runner_->cgroup_parent(), old_runner);
  EXPECT_FALSE(glob_paths(old_pool).empty()) << "kill -9 leaves the pool's cgroup for the next start";
  ASSERT_TRUE(runner_->start()) << runner_->log();
  EXPECT_TRUE(glob_paths(old_pool).empty()) << "the next start's recovery removes it";
  ASSERT_TRUE(wait_until_ready()) << runner_->log();
  auto r = runner_->client({"run", "--no-sync", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(SandboxPoolOff, ASizeOfZeroBuildsNothingAhead) {
  MOTOR_REQUIRE(geteuid() == 0, "integration tests run real jobs and need root");
  RunnerProcess runner("sandbox_pool_size = 0\n");
  ASSERT_TRUE(runner.start()) << runner.log();
  auto r = runner.client({"run", "--no-sync", "--", "echo", "built its own"});
  EXPECT_EQ(r.out, "built its own\n");
  const std::string status = runner_status(runner);
  EXPECT_EQ(json_field(status, "/result/sandboxes_ready"), "0");
  EXPECT_EQ(json_field(status, "/result/jobs_started_in_sandboxes_ready"), "0");
}

}  // namespace
}  // namespace motor::test
