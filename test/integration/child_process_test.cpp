// The loop's one way to run a child (src/reactor/child_process): real processes on a real libuv
// loop; bounded output, the deadline, exit codes and signals, a missing binary, a dropped owner,
// a child adopted by its pidfd, and a grandchild that keeps the pipe open.
#include "reactor/child_process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

extern char** environ;

namespace motor::test {
namespace {

using reactor::ChildExit;
using reactor::ChildProcess;
using reactor::ChildSpec;

bool process_exists(pid_t pid) { return kill(pid, 0) == 0; }

class ChildProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(uv_loop_init(&loop_), 0); }
  void TearDown() override {
    uv_run(&loop_, UV_RUN_DEFAULT);  // every handle closed: the watch freed itself
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle of a child was left open";
  }
  // Runs the loop until `done` holds or 10 s pass.
  bool run_until(const std::function<bool()>& done) {
    uv_timer_t tick;
    uv_timer_init(&loop_, &tick);
    uv_timer_start(&tick, [](uv_timer_t*) {}, 10, 10);
    const uint64_t deadline = uv_hrtime() + uint64_t{10} * 1000000000;
    while (!done() && uv_hrtime() < deadline) uv_run(&loop_, UV_RUN_ONCE);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
    uv_run(&loop_, UV_RUN_NOWAIT);
    return done();
  }
  ChildExit run(ChildSpec spec) {
    std::optional<ChildExit> result;
    auto child = ChildProcess::spawn(&loop_, spec, [&](ChildExit e) { result = std::move(e); });
    EXPECT_TRUE(child.ok()) << child.error().message;
    if (!child) return {};
    EXPECT_TRUE(run_until([&] { return result.has_value(); }));
    EXPECT_TRUE((*child)->finished());
    return result.value_or(ChildExit{});
  }
  static ChildSpec shell(const std::string& script) {
    ChildSpec spec;
    spec.file = "/bin/sh";
    spec.argv = {"sh", "-c", script};
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.timeout_ms = 10000;
    return spec;
  }
  uv_loop_t loop_{};
};

// A streamed stdout arrives chunk by chunk while the child runs, bounded like a collected one.
TEST_F(ChildProcessTest, StreamsStdoutAsItArrivesAndBoundsIt) {
  ChildSpec spec = shell("printf first; sleep 0.3; printf second; head -c 100000 /dev/zero");
  spec.max_stdout_bytes = 1000;
  std::optional<ChildExit> result;
  std::string streamed;
  auto child = ChildProcess::spawn(&loop_, spec, [&](ChildExit e) { result = std::move(e); });
  ASSERT_TRUE(child.ok()) << child.error().message;
  (*child)->stream_stdout([&](std::string_view chunk) { streamed.append(chunk); });
  ASSERT_TRUE(run_until([&] { return streamed == "first"; })) << "the first chunk did not arrive before the child ended";
  EXPECT_FALSE(result.has_value());
  ASSERT_TRUE(run_until([&] { return result.has_value(); }));
  EXPECT_EQ(streamed.size(), 1000u);
  EXPECT_EQ(streamed.substr(0, 11), "firstsecond");
  EXPECT_TRUE(result->stdout_truncated);
  EXPECT_EQ(result->out, "") << "a streamed stdout is not also collected";
}

TEST_F(ChildProcessTest, ReportsExitCodeOutputAndStderrTail) {
  auto e = run(shell("echo out; echo 'it broke' >&2; exit 3"));
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.term_signal, 0);
  EXPECT_EQ(e.out, "out\n");
  EXPECT_EQ(e.err_tail, "it broke\n");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.describe(), "exit 3: it broke");
  auto fine = run(shell("printf ok"));
  EXPECT_TRUE(fine.ok()) << fine.describe();
  EXPECT_EQ(fine.out, "ok");
}

// A child with no account to switch to is started sharing the caller's memory (posix_spawn);
// it starts as uv_spawn's children do: no signal ignored or blocked though the caller ignores
// SIGPIPE and blocks SIGUSR1, stdin /dev/null, the asked cwd, only the given environment.
TEST_F(ChildProcessTest, AChildStartsWithDefaultSignalsNullStdinItsCwdAndOnlyItsEnvironment) {
  struct sigaction ignore {}, old_pipe {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &old_pipe), 0);
  sigset_t usr1, old_mask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &old_mask), 0);
  // glibc's posix_spawn leaves its own two internal signals (32, 33) ignored: no program sees them.
  auto spec = shell("ign=$(grep ^SigIgn /proc/self/status | cut -f2); blk=$(grep ^SigBlk /proc/self/status | cut -f2); "
                    "echo $(( 0x$ign & ~0x180000000 )) $(( 0x$blk )); readlink /proc/self/fd/0; pwd; env | grep -v '^PWD='");
  spec.cwd = "/usr";
  auto e = run(spec);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(e.out, "0 0\n/dev/null\n/usr\nPATH=/usr/bin:/bin\n");
}

TEST_F(ChildProcessTest, BoundsStdoutAndSaysItWasCut) {
  auto spec = shell("head -c 1000000 /dev/zero; head -c 100000 /dev/zero >&2");
  spec.max_stdout_bytes = 1000;
  auto e = run(spec);
  EXPECT_EQ(e.exit_code, 0) << "the child must not block on a full pipe";
  EXPECT_EQ(e.out.size(), 1000u);
  EXPECT_TRUE(e.stdout_truncated);
  EXPECT_FALSE(e.ok()) << "cut output is not a success";
  EXPECT_NE(e.describe().find("output over 1000 bytes, cut"), std::string::npos) << e.describe();
  EXPECT_EQ(e.err_tail.size(), 4096u) << "only the tail of stderr is kept";
}

TEST_F(ChildProcessTest, KillsTheChildAtItsDeadline) {
  auto spec = shell("echo started; exec sleep 30");
  spec.timeout_ms = 200;
  const uint64_t t0 = uv_hrtime();
  auto e = run(spec);
  EXPECT_TRUE(e.timed_out);
  EXPECT_EQ(e.term_signal, SIGKILL);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_EQ(e.out, "started\n");
  EXPECT_EQ(e.describe(), "timed out");
  EXPECT_LT(uv_hrtime() - t0, uint64_t{10} * 1000000000) << "not killed: it ran to its end";
}

TEST_F(ChildProcessTest, ReportsTheSignalThatEndedIt) {
  auto e = run(shell("kill -TERM $$"));
  EXPECT_EQ(e.term_signal, SIGTERM);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_FALSE(e.timed_out);
  EXPECT_EQ(e.shell_status(), 128 + SIGTERM);
  EXPECT_EQ(e.describe(), "killed by signal 15");
}

TEST_F(ChildProcessTest, AMissingBinaryIsAnErrorNotACrash) {
  ChildSpec spec;
  spec.file = "/nonexistent/motor-no-such-tool";
  spec.argv = {"motor-no-such-tool"};
  bool called = false;
  auto child = ChildProcess::spawn(&loop_, spec, [&](ChildExit) { called = true; });
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.error().code, "spawn_failed");
  EXPECT_NE(child.error().message.find("/nonexistent/motor-no-such-tool"), std::string::npos) << child.error().message;
  std::optional<Expected<ChildExit>> detached;
  ChildProcess::run_detached(&loop_, spec, [&](Expected<ChildExit> e) { detached = std::move(e); });
  ASSERT_TRUE(detached.has_value()) << "a detached run reports a failed start at once";
  EXPECT_FALSE(detached->ok());
  uv_run(&loop_, UV_RUN_NOWAIT);
  EXPECT_FALSE(called);
}

TEST_F(ChildProcessTest, DroppingTheOwnerKillsAndReapsTheChild) {
  bool called = false;
  auto child = ChildProcess::spawn(&loop_, shell("exec sleep 30"), [&](ChildExit) { called = true; });
  ASSERT_TRUE(child.ok());
  const pid_t pid = (*child)->pid();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(process_exists(pid));
  child->reset();
  // Gone and reaped (kill(0) fails only once the zombie is reaped), on the loop.
  EXPECT_TRUE(run_until([&] { return !process_exists(pid); }));
  EXPECT_FALSE(called) << "the callback reached an owner that is gone";
}

TEST_F(ChildProcessTest, ADetachedRunReportsItsEnd) {
  std::optional<Expected<ChildExit>> result;
  ChildProcess::run_detached(&loop_, shell("echo detached"), [&](Expected<ChildExit> e) { result = std::move(e); });
  ASSERT_TRUE(run_until([&] { return result.has_value(); }));
  ASSERT_TRUE(result->ok()) << result->error().message;
  EXPECT_EQ((*result)->out, "detached\n");
}

TEST_F(ChildProcessTest, AGrandchildHoldingThePipeDoesNotHoldTheReport) {
  // The shell exits at once; the sleep it left keeps stdout open. Reported about a second later.
  auto e = run(shell("sleep 30 & echo $!; exit 4"));
  EXPECT_EQ(e.exit_code, 4);
  const pid_t grandchild = std::stoi(e.out);
  ASSERT_GT(grandchild, 0);
  kill(grandchild, SIGKILL);  // ours: started by this test
}

TEST_F(ChildProcessTest, AnAdoptedChildIsReadReapedAndKilledByItsPidfd) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd out_read(fds[0]), out_write(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  const char* argv[] = {"sh", "-c", "echo adopted; exec sleep 30", nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  out_write.reset();
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  ASSERT_TRUE(pidfd.valid());
  std::optional<ChildExit> result;
  auto child = ChildProcess::adopt(&loop_, pid, std::move(pidfd), std::move(out_read), UniqueFd(), 300, 4096,
                                   [&](ChildExit e) { result = std::move(e); });
  ASSERT_TRUE(child.ok()) << child.error().message;
  ASSERT_TRUE(run_until([&] { return result.has_value(); }));
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->term_signal, SIGKILL);
  EXPECT_EQ(result->out, "adopted\n");
  EXPECT_FALSE(process_exists(pid)) << "not reaped";
}

}  // namespace
}  // namespace motor::test
