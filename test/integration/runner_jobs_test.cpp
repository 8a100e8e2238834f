// A real runner, real jobs as motor-job in real cgroups: output, exit codes, timeouts, cancels,
// backpressure, restarts after kill -9, and shutdown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <thread>

#include "support/runner_harness.hpp"
#include "support/state_text.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

class RunnerJobs : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests run real jobs and need root");
    runner_ = std::make_unique<RunnerProcess>();
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override {
    if (runner_ && !marker_.empty()) {
      // Nothing a test started may outlive it, whatever happened.
      for (pid_t p : processes_with(marker_)) kill(p, SIGKILL);
    }
    runner_.reset();
  }

  // A shell command that starts a tree of 50 processes: 47 sleepers, and a double-forked
  // `setsid` daemon that ignores SIGTERM and keeps a sleeper of its own, each findable by marker.
  std::string process_tree_command() {
    marker_ = unique_marker();
    return fmt::format(
        "for i in $(seq 47); do sleep 3600.{m} & done; "
        "(setsid sh -c 'trap \"\" TERM; sleep 3600.{m} & while :; do sleep 3600.{m}; done' &); "
        "echo tree started; wait",
        fmt::arg("m", marker_));
  }

  bool wait_for_processes(size_t at_least, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (processes_with("3600." + marker_).size() >= at_least) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  std::unique_ptr<RunnerProcess> runner_;
  std::string marker_;
};

TEST_F(RunnerJobs, OutputAndExitCodeReachTheClient) {
  auto r = runner_->client({"run", "-c", "echo out; echo err >&2; exit 7"});
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST_F(RunnerJobs, ArgvRunsWithoutAShell) {
  auto r = runner_->client({"run", "--", "/bin/echo", "$HOME", "a b"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "$HOME a b\n");
}

TEST_F(RunnerJobs, JobRunsAsTheJobAccountNotRoot) {
  auto r = runner_->client({"run", "--", "/usr/bin/id", "-u"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out, "0\n");
  EXPECT_EQ(r.out, run_program({"/usr/bin/id", "-u", "motor-job"}).out);
}

// A command killed by a signal inside the sandbox is reported as that signal (motor-init, its
// PID 1, names itself for the runner), and the client exits 128+N; a command that exits 128+N
// itself is an exit.
TEST_F(RunnerJobs, SignalDeathIsReportedAsTheSignal) {
  for (const auto& [script, sig] : {std::pair{"kill -9 $$", SIGKILL}, std::pair{"kill -SEGV $$", SIGSEGV}}) {
    auto r = runner_->client({"run", "--json", "-c", script});
    EXPECT_EQ(r.exit_code, 128 + sig) << script;
    EXPECT_NE(r.out.find(fmt::format("\"outcome\":{{\"type\":\"signal\",\"signal\":{}}}", sig)), std::string::npos)
        << script << ": " << r.out;
  }
  auto r = runner_->client({"run", "--json", "-c", "exit 137"});
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_NE(r.out.find("\"outcome\":{\"type\":\"exit\",\"code\":137}"), std::string::npos) << r.out;
}

TEST_F(RunnerJobs, MissingCommandExits127WithAMessage) {
  auto r = runner_->client({"run", "--", "no-such-command-here"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("no-such-command-here"), std::string::npos) << r.err;
}

// motor-init starts the command with posix_spawnp; a file with no interpreter line still runs
// under /bin/sh, as execvp runs it (motor-init forks for that case), and a file that may not be
// executed exits 126 with a message.
TEST_F(RunnerJobs, AScriptWithoutAnInterpreterLineRunsUnderShAndAFileThatIsNotExecutableExits126) {
  auto made = runner_->client({"run", "-w", "no-interpreter-line", "-c",
                               "printf 'echo ran-by-sh \"$1\"\\n' >plain && chmod 755 plain && : >not-executable"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto r = runner_->client({"run", "-w", "no-interpreter-line", "--", "./plain", "its-arg"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ran-by-sh its-arg\n") << r.err;
  auto refused = runner_->client({"run", "-w", "no-interpreter-line", "--", "./not-executable"});
  EXPECT_EQ(refused.exit_code, 126) << refused.err;
  EXPECT_NE(refused.err.find("cannot execute ./not-executable"), std::string::npos) << refused.err;
}

TEST_F(RunnerJobs, CallerSecretsAreNotForwarded) {
  auto r = runner_->client({"run", "--json", "--env", "GH_TOKEN=canary-1", "--env", "CARGO_TERM_COLOR=never", "-c",
                            "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("canary-1"), std::string::npos);
  EXPECT_NE(r.out.find("\"env_not_forwarded\":[\"GH_TOKEN\"]"), std::string::npos) << r.out;
  auto plain = runner_->client({"run", "--env", "GH_TOKEN=canary-1", "--env", "CARGO_TERM_COLOR=never", "-c", "env"});
  EXPECT_EQ(plain.out.find("canary-1"), std::string::npos);
  EXPECT_NE(plain.out.find("CARGO_TERM_COLOR=never"), std::string::npos);
}

TEST_F(RunnerJobs, TimeoutKillsTheWholeTreeIncludingASetsidDaemon) {
  const auto started = std::chrono::steady_clock::now();
  auto r = runner_->client({"run", "--timeout", "3", "-c", process_tree_command()});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.out.find("tree started"), std::string::npos);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 3s);
  // The terminal record came only after the cgroup was empty: nothing of the tree is left.
  EXPECT_TRUE(processes_with("3600." + marker_).empty());
}

TEST_F(RunnerJobs, TreeReallyHadFiftyProcessesBeforeTheKill) {
  // The same tree as above, seen while it runs: the kill test is not passing on an empty tree.
  const std::string command = process_tree_command();
  pid_t client = fork();
  if (client == 0) {
    execl(MOTOR_CLIENT_BIN, MOTOR_CLIENT_BIN, "--socket", runner_->socket().c_str(), "run", "--no-sync", "--timeout", "20", "-c",
          command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  EXPECT_TRUE(wait_for_processes(49, 15s)) << processes_with("3600." + marker_).size();
  kill(client, SIGINT);  // Ctrl-C cancels the job
  int status = 0;
  waitpid(client, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_TRUE(processes_with("3600." + marker_).empty());
}

TEST_F(RunnerJobs, CancelKillsTheWholeTree) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.connected());
  const std::string command = process_tree_command();
  ASSERT_TRUE(c.send_frame(
      fmt::format(R"({{"id":1,"method":"exec.run","params":{{"command":{},"timeout":60}}}})", json_quote(command))));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  ASSERT_EQ(json_field(*accepted, "/type"), "accepted") << *accepted;
  const std::string job_id = json_field(*accepted, "/job_id");
  ASSERT_TRUE(wait_for_processes(49, 15s));

  auto r = runner_->client({"cancel", job_id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string terminal;
  for (int i = 0; i < 100 && terminal.empty(); ++i) {
    auto f = c.read_frame();
    ASSERT_TRUE(f) << "no terminal record";
    if (json_field(*f, "/type") == "terminal") terminal = *f;
  }
  // Issue 17: a job cancelled while running ends with the signal that ended it.
  EXPECT_EQ(json_field(terminal, "/outcome"), R"({"type":"signal","signal":9})") << terminal;
  EXPECT_EQ(json_field(terminal, "/killed"), "cancel");
  EXPECT_TRUE(processes_with("3600." + marker_).empty());
  // Cancelling again is harmless (idempotent).
  EXPECT_EQ(runner_->client({"cancel", job_id}).exit_code, 0);
}

TEST_F(RunnerJobs, AStalledClientNeitherBlocksTheJobNorGrowsTheRunner) {
  RawClient stalled(runner_->socket());
  ASSERT_TRUE(stalled.connected());
  // 1 GiB of output to a client that never reads a byte of it.
  ASSERT_TRUE(stalled.send_frame(
      R"({"id":1,"method":"exec.run","params":{"command":"head -c 1073741824 /dev/zero","timeout":300}})"));
  const int64_t rss_before = peak_rss_bytes(runner_->pid());
  std::string job_id;
  // Find the job and wait for it to finish while the first client still reads nothing.
  for (int i = 0; i < 3000; ++i) {
    auto r = runner_->client({"list", "--json"});
    const auto at = r.out.find("head -c 1073741824");
    if (at != std::string::npos && r.out.find("\"state\":\"finished\"") != std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  }
  auto list = runner_->client({"list", "--json"});
  EXPECT_NE(list.out.find("\"state\":\"finished\""), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("\"outcome\":{\"type\":\"exit\",\"code\":0}"), std::string::npos) << list.out;
  const int64_t rss_after = peak_rss_bytes(runner_->pid());
  // Per-client bound is 1 MiB in flight plus the kernel's socket buffer; allow generous slack
  // for the heap, but nowhere near the 1 GiB the job wrote.
  EXPECT_LT(rss_after - rss_before, 64ll << 20) << "before " << rss_before << " after " << rss_after;
  EXPECT_LT(rss_after, 128ll << 20);
  // Other clients were served throughout.
  EXPECT_EQ(runner_->client({"run", "-c", "echo still serving"}).out, "still serving\n");
}

TEST_F(RunnerJobs, KillNineOfTheRunnerThenRestartAccountsForTheJob) {
  RawClient c(runner_->socket());
  const std::string command = process_tree_command();
  ASSERT_TRUE(c.send_frame(
      fmt::format(R"({{"id":1,"method":"exec.run","params":{{"command":{},"timeout":600}}}})", json_quote(command))));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job_id = json_field(*accepted, "/job_id");
  ASSERT_TRUE(wait_for_processes(49, 15s));
  // The output is in the job's log before the runner dies.
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) {
  }

  runner_->kill9();
  // The job's processes outlive a dead runner: the restart must find and kill them.
  EXPECT_FALSE(processes_with("3600." + marker_).empty());
  ASSERT_TRUE(runner_->start()) << runner_->log();
  EXPECT_TRUE(processes_with("3600." + marker_).empty());

  auto status = runner_->client({"status", job_id, "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(json_field(status.out, "/result/state"), "finished");
  EXPECT_EQ(json_field(status.out, "/result/terminal/outcome/type"), "outcome_unknown") << status.out;
  // Its history still ends with that terminal record.
  auto attach = runner_->client({"attach", job_id});
  EXPECT_EQ(attach.exit_code, 71);  // outcome_unknown: the runner lost it (docs/protocol.md)
  EXPECT_NE(attach.out.find("tree started"), std::string::npos);
}

TEST_F(RunnerJobs, SigtermKillsRunningJobsAndExitsZero) {
  RawClient c(runner_->socket());
  const std::string command = process_tree_command();
  ASSERT_TRUE(c.send_frame(fmt::format(R"({{"id":1,"method":"exec.run","params":{{"command":{}}}}})", json_quote(command))));
  ASSERT_TRUE(c.read_frame());
  ASSERT_TRUE(wait_for_processes(49, 15s));
  EXPECT_EQ(runner_->stop(), 0) << runner_->log();
  EXPECT_TRUE(processes_with("3600." + marker_).empty());
  std::string terminal;
  for (int i = 0; i < 100 && terminal.empty(); ++i) {
    auto f = c.read_frame(2000ms);
    if (!f) break;
    if (json_field(*f, "/type") == "terminal") terminal = *f;
  }
  EXPECT_EQ(json_field(terminal, "/outcome"), R"({"type":"signal","signal":9})") << terminal;
  EXPECT_EQ(json_field(terminal, "/killed"), "shutdown") << terminal;
  const std::string state = state_text(runner_->state_dir());
  EXPECT_EQ(state.find("\"state\":\"running\""), std::string::npos) << state;
}

TEST_F(RunnerJobs, StateFileIsPrivateAndNamesFinishedJobs) {
  auto r = runner_->client({"run", "--json", "-c", "true"});
  ASSERT_EQ(r.exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat((runner_->state_dir() + "/state.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(state_text(runner_->state_dir()).find(json_field(r.out.substr(0, r.out.find('\n')), "/job_id")),
            std::string::npos);
}

}  // namespace
}  // namespace motor::test
