// The runner's workspace helpers (checkout, scan, drop in motor-workspace-sandbox) against what a
// job leaves behind (issue 15 items 1 and 2, issue 14 item 11): a FIFO where git opens a file
// blocks nothing, a scan is charged the job's memory limit, nothing of a checkout outlives a
// killed runner and no job sees a half-written workspace. And callers' text reaches the
// operator's terminal and log escaped (issue 15, leaks).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "support/checkout_fixture.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

std::string terminal_of(const std::string& out) {
  const auto at = out.find("\"type\":\"terminal\"");
  if (at == std::string::npos) return "<no terminal>";
  const auto line_start = out.rfind('\n', at);
  const auto line_end = out.find('\n', at);
  return out.substr(line_start == std::string::npos ? 0 : line_start + 1,
                    line_end == std::string::npos ? std::string::npos : line_end - line_start - 1);
}

bool eventually(const std::function<bool()>& check, std::chrono::milliseconds limit = 30s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (check()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return check();
}

class RunnerWorkspaceHelpers : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override {
    return "printf 'target/\\n' > .gitignore && for i in 1 2 3; do echo line $i > f$i.txt; done";
  }
  CommandResult motor(const std::vector<std::string>& args, std::chrono::seconds timeout = 120s) {
    return runner_->client_in(repo_, args, env_, timeout);
  }
  // Helper cgroups of this runner's parent still there (every hierarchy).
  std::vector<std::string> helper_cgroups() const {
    return glob_paths(fmt::format("/sys/fs/cgroup/*/{}/ws-helper-*", runner_->cgroup_parent()));
  }

};

// Item 1. A job leaves a FIFO named .gitignore in an untracked folder. git opens every .gitignore
// it meets: without the helper's masks the scan blocks until its 300 s deadline (the client here
// gives up after 60 s), and the checkout's `git clean` and the drop would block the same way.
TEST_F(RunnerWorkspaceHelpers, FifoNamedGitignoreBlocksNeitherScanNorCheckoutNorDrop) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0) << runner_->log();
  const auto t0 = std::chrono::steady_clock::now();
  auto job = motor({"run", "--no-sync", "-w", "k", "--json", "-c",
                    "mkdir -p /workspace/untracked && mkfifo /workspace/untracked/.gitignore && "
                    "mkfifo /workspace/untracked/.gitattributes && echo more >> /workspace/f1.txt"},
                   60s);
  ASSERT_EQ(job.exit_code, 0) << job.out << job.err << runner_->log();
  const std::string terminal = terminal_of(job.out);
  // The scan ran (a list, not null). git tracks no FIFO, so only the edit is a change.
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), R"(["f1.txt"])") << terminal;
  // Meanwhile, and after, another workspace's job runs at once.
  auto other = motor({"run", "--no-sync", "-w", "other", "--", "/bin/true"}, 60s);
  EXPECT_EQ(other.exit_code, 0) << other.err;
  // The next prepare resets the changed workspace (git clean over the FIFO's folder) and removes it.
  auto again = motor({"workspace", "prepare", "-w", "k"}, 60s);
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err << runner_->log();
  struct stat st {};
  EXPECT_NE(lstat((runner_->workspace("k") + "/untracked/.gitignore").c_str(), &st), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 90s);
  // A FIFO left again, then dropped.
  ASSERT_EQ(motor({"run", "--no-sync", "-w", "k", "-c", "mkdir -p /workspace/u2 && mkfifo /workspace/u2/.gitignore"}, 60s)
                .exit_code,
            0);
  auto drop = motor({"workspace", "drop", "-w", "k"}, 60s);
  EXPECT_EQ(drop.exit_code, 0) << drop.err;
  EXPECT_TRUE(eventually([&] { return helper_cgroups().empty(); })) << helper_cgroups().front();
}

// Item 1, the queue: a workspace whose scan is stuck (the FIFO mask weakened, so git blocks opening
// a FIFO named .gitignore) holds up its own next job, never another workspace's.
TEST_F(RunnerWorkspaceHelpers, AStuckWorkspaceHoldsUpOnlyItsOwnJobs) {
  runner_ = std::make_unique<RunnerProcess>();
  runner_->use_binary(MOTOR_RUNNER_TESTING_BIN, {"--test-weaken=scan-masks"});
  ASSERT_TRUE(runner_->start()) << runner_->log();
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0) << runner_->log();
  const std::string fifo = runner_->workspace("k") + "/untracked/.gitignore";
  CommandResult stuck, queued;
  std::atomic<bool> stuck_done{false}, queued_done{false};
  std::thread first([&] {
    stuck = motor({"run", "--no-sync", "-w", "k", "-c", "mkdir -p /workspace/untracked && mkfifo /workspace/untracked/.gitignore"}, 90s);
    stuck_done = true;
  });
  struct stat st {};
  ASSERT_TRUE(eventually([&] { return lstat(fifo.c_str(), &st) == 0; })) << runner_->log();
  std::thread second([&] {
    queued = motor({"run", "--no-sync", "-w", "k", "--", "/bin/true"}, 90s);
    queued_done = true;
  });
  std::this_thread::sleep_for(1s);  // the second job of "k" is queued first
  const auto t0 = std::chrono::steady_clock::now();
  auto other = motor({"run", "--no-sync", "-w", "other", "--", "/bin/true"}, 30s);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(other.exit_code, 0) << other.err << runner_->log();
  EXPECT_LT(waited, 25s) << "another workspace's job waited behind the stuck one";
  EXPECT_FALSE(stuck_done) << "the scan was not stuck: " << stuck.out << stuck.err;
  // Unblock the scans (the second job's too): open the FIFO's other end (git's open returns and it
  // reads EOF).
  for (int i = 0; i < 300 && !(stuck_done && queued_done); ++i) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO while no reader
    if (fd >= 0) ::close(fd);
    std::this_thread::sleep_for(100ms);
  }
  first.join();
  second.join();
  EXPECT_EQ(stuck.exit_code, 0) << stuck.err << runner_->log();
  EXPECT_EQ(queued.exit_code, 0) << queued.err << runner_->log();
}

// Issue 15, shutdown: a SIGTERM never waits for a stuck scan (git blocked opening a FIFO named
// .gitignore, the mask weakened). The runner abandons the scan (the job's report is null), tells the
// client, exits long before the scan's own 300 s deadline, and nothing of the scan outlives it.
// Without the bound the runner waits for the scan and stop() gives up.
TEST_F(RunnerWorkspaceHelpers, ShutdownDoesNotWaitForAStuckScan) {
  runner_ = std::make_unique<RunnerProcess>();
  runner_->use_binary(MOTOR_RUNNER_TESTING_BIN, {"--test-weaken=scan-masks"});
  ASSERT_TRUE(runner_->start()) << runner_->log();
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0) << runner_->log();
  const std::string fifo = runner_->workspace("k") + "/untracked/.gitignore";
  CommandResult stuck;
  std::atomic<bool> stuck_done{false};
  std::thread first([&] {
    stuck = motor({"run", "--no-sync", "--json", "-w", "k", "-c",
                   "mkdir -p /workspace/untracked && mkfifo /workspace/untracked/.gitignore"}, 120s);
    stuck_done = true;
  });
  struct stat st {};
  ASSERT_TRUE(eventually([&] { return lstat(fifo.c_str(), &st) == 0; })) << runner_->log();
  // The scan has begun (its helper cgroup exists) and is stuck on the FIFO.
  ASSERT_TRUE(eventually([&] { return !helper_cgroups().empty(); })) << runner_->log();
  std::this_thread::sleep_for(1s);
  ASSERT_FALSE(stuck_done) << "the scan was not stuck: " << stuck.out << stuck.err;
  const std::string log_before = runner_->log();
  const int status = runner_->stop(60s);
  EXPECT_EQ(status, 0) << "the runner did not exit within 60 s of SIGTERM: it waited for the stuck scan\n"
                       << runner_->log();
  if (status < 0) {
    // Unblock the scan so the runner (and the client) can end.
    for (int i = 0; i < 300 && !stuck_done; ++i) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(100ms);
    }
  }
  first.join();
  EXPECT_NE(runner_->log().find("workspace scan has not ended"), std::string::npos) << runner_->log();
  const std::string terminal = terminal_of(stuck.out);
  EXPECT_EQ(stuck.exit_code, 0) << stuck.out << stuck.err;
  EXPECT_EQ(json_field(terminal, "/outcome/type"), "exit") << terminal << stuck.err;
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), "null") << terminal;
  // The scan's helper died with the runner: no process is left in its cgroups.
  EXPECT_TRUE(eventually([&] {
    for (const auto& cg : helper_cgroups()) {
      if (!read_file(cg + "/cgroup.procs").empty()) return false;
    }
    return true;
  })) << "a scan helper outlived the runner";
}

// Item 2. A job capped at 64 MiB plants 160 MiB of ignore patterns for the scan's git to load
// (about twice that in git's memory): the scan runs in a cgroup with the job's own limit, so it is
// stopped there and the report says it could not be computed (null), instead of git taking
// hundreds of MiB outside every limit.
TEST_F(RunnerWorkspaceHelpers, ScanIsChargedTheJobsMemoryLimit) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0) << runner_->log();
  auto job = motor({"run", "--no-sync", "-w", "k", "--json", "--memory", "64M", "-c",
                    "mkdir -p /workspace/big && yes '/a-long-ignore-pattern-that-git-must-keep-in-memory-*.o' | "
                    "head -c 160M > /workspace/big/.gitignore"},
                   240s);
  ASSERT_EQ(job.exit_code, 0) << job.out << job.err << runner_->log();
  const std::string terminal = terminal_of(job.out);
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), "null") << terminal;
  EXPECT_NE(runner_->log().find("the changed-paths scan failed"), std::string::npos) << runner_->log();
  EXPECT_TRUE(eventually([&] { return helper_cgroups().empty(); })) << helper_cgroups().front();
  // The same scan with room for it works (the limit, not something else, stopped it).
  auto roomy = motor({"run", "--no-sync", "-w", "k", "--json", "--memory", "2G", "-c", "true"}, 240s);
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_NE(json_field(terminal_of(roomy.out), "/workspace_changes").find("big/.gitignore"), std::string::npos)
      << terminal_of(roomy.out);
}

// Item 2 / issue 14 item 11. kill -9 of the runner during a checkout: the helper and everything
// in its sandbox die with it (PR_SET_PDEATHSIG), and the restarted runner finds the checkout's
// mark and drops the half-written workspace: the next job sees an empty one, never part of a tree.
TEST_F(RunnerWorkspaceHelpers, RunnerKilledDuringACheckoutLeavesNothingAndNoHalfWrittenWorkspace) {
  // Enough files that the checkout takes a while on this host.
  sh(repo_, "mkdir -p many && i=0; while [ $i -lt 6000 ]; do head -c 4096 /dev/urandom > many/f$i; i=$((i+1)); done; "
            "git add -A && git commit -qm many",
     300s);
  const std::string checkout_marker = "commit=$1 tree=$2 mode=$3";
  std::atomic<bool> done{false};
  std::thread prepare([&] {
    motor({"workspace", "prepare", "-w", "k"}, 240s);
    done = true;
  });
  // Killed once the checkout has written part of the tree (and is still writing).
  const std::string many = runner_->workspace("k") + "/many";
  auto files_written = [&] {
    std::error_code ec;
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(many, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      ++n;
    }
    return n;
  };
  const bool seen = eventually([&] { return done || (files_written() >= 50 && !processes_with(checkout_marker).empty()); },
                               200s) &&
                    !done;
  if (seen) runner_->kill9();
  const size_t written = files_written();
  prepare.join();
  ASSERT_TRUE(seen) << "the checkout ended before the test could kill the runner";
  ASSERT_LT(written, 6000u) << "the checkout was complete when the runner was killed";
  // Nothing of the checkout outlives the runner: no helper, and its cgroup empty, at once (a
  // helper that lived on would still be writing the rest of the tree).
  EXPECT_TRUE(eventually([&] { return processes_with(checkout_marker).empty(); }, 2s))
      << "a checkout helper outlived the runner";
  for (const auto& dir : helper_cgroups()) {
    if (dir.find("/unified/") != std::string::npos) continue;
    EXPECT_TRUE(eventually([&] { return read_file(dir + "/cgroup.procs").empty(); }, 10s)) << dir;
  }
  // Restarted: the half-written workspace is gone, the key unprepared, the next job sees nothing.
  ASSERT_TRUE(runner_->start()) << runner_->log();
  EXPECT_NE(runner_->log().find("a checkout was interrupted"), std::string::npos) << runner_->log();
  auto job = motor({"run", "--no-sync", "-w", "k", "-c", "ls -A /workspace | wc -l"}, 60s);
  EXPECT_EQ(job.exit_code, 0) << job.err;
  EXPECT_EQ(job.out, "0\n");
  // The leftover helper cgroup of the killed runner is swept at the start.
  EXPECT_TRUE(eventually([&] { return helper_cgroups().empty(); })) << helper_cgroups().front();
  // And a prepare now checks it out in full.
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}, 240s).exit_code, 0) << runner_->log();
  struct stat st {};
  EXPECT_EQ(lstat((runner_->workspace("k") + "/many/f5999").c_str(), &st), 0);
}

// Leaks: a caller's command line with escape sequences is shown escaped by `motor list` and in
// the runner's log, never sent raw to the operator's terminal.
TEST_F(RunnerWorkspaceHelpers, ListAndLogShowCommandLinesEscaped) {
  const std::string command = "true '\x1b]0;owned\x07\x1b[2J'";
  ASSERT_EQ(runner_->client({"run", "--no-sync", "-w", "esc", "-c", command}).exit_code, 0);
  auto list = runner_->client({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out.find('\x1b'), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find('\x07'), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("\\x1b]0;owned\\x07\\x1b[2J"), std::string::npos) << list.out;
  const std::string log = runner_->log();
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
  EXPECT_NE(log.find("\\x1b[2J"), std::string::npos) << log;
}

}  // namespace
}  // namespace motor::test
