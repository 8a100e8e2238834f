// The runner as a systemd service sees it: readiness, watchdog and stopping notifications, and
// the two SIGTERM policies.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

TEST(RunnerLifecycle, NotifiesReadyWatchdogAndStoppingTheSystemdWay) {
  MOTOR_REQUIRE(geteuid() == 0, "starts a real runner; needs root");
  const std::string dir = make_temp_dir();
  chmod(dir.c_str(), 0711);
  const std::string notify = dir + "/notify";
  const int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string parent = "motor-test-" + unique_marker();
  write_file(dir + "/c.conf", "cgroup_parent = " + parent + "\n");
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("NOTIFY_SOCKET", notify.c_str(), 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    execl(MOTOR_RUNNER_BIN, MOTOR_RUNNER_BIN, "serve", "--config", (dir + "/c.conf").c_str(), "--state-dir",
          (dir + "/state").c_str(), "--socket", (dir + "/s.sock").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string seen;
  auto collect = [&](std::chrono::milliseconds for_how_long) {
    const auto until = std::chrono::steady_clock::now() + for_how_long;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = recv(sock, buf, sizeof buf, 0);
        if (n > 0) seen.append(buf, static_cast<size_t>(n)).push_back('\n');
      }
    }
  };
  collect(1500ms);
  EXPECT_NE(seen.find("READY=1"), std::string::npos) << seen;
  EXPECT_NE(seen.find("STATUS="), std::string::npos) << seen;
  EXPECT_NE(seen.find("WATCHDOG=1"), std::string::npos) << seen;  // pinged at half of 200 ms
  kill(pid, SIGTERM);
  collect(500ms);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_NE(seen.find("STOPPING=1"), std::string::npos) << seen;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sock);
  for (const char* h : {"unified", "memory", "pids", "cpuset", "freezer"}) {
    rmdir(fmt::format("/sys/fs/cgroup/{}/{}", h, parent).c_str());
  }
  remove_tree(dir);
}

TEST(RunnerLifecycle, ShutdownFinishLetsRunningJobsEndThenExitsZero) {
  MOTOR_REQUIRE(geteuid() == 0, "starts a real runner; needs root");
  RunnerProcess runner("shutdown = finish\nshutdown_grace_s = 20\n");
  ASSERT_TRUE(runner.start());
  RawClient c(runner.socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"sleep 1; echo finished"}})"));
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "started";) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(runner.stop(), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 500ms);  // it waited for the job
  std::string terminal;
  for (std::optional<std::string> f; (f = c.read_frame(2000ms));) {
    if (json_field(*f, "/type") == "terminal") terminal = *f;
  }
  EXPECT_EQ(json_field(terminal, "/outcome/code"), "0") << terminal;  // it ran to its end
}

// A client between two requests when the runner stops is told so before the connection closes:
// a bare EOF read like a runner that died (the gate's pid-namespace row, issue 16).
TEST(RunnerLifecycle, ShutdownTellsAnIdleClientWhyItsConnectionCloses) {
  MOTOR_REQUIRE(geteuid() == 0, "starts a real runner; needs root");
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  RawClient c(runner.socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"runner.hello","params":{}})"));
  ASSERT_TRUE(c.read_frame());
  EXPECT_EQ(runner.stop(), 0);
  const auto said = c.read_frame(2000ms);
  ASSERT_TRUE(said) << "the runner closed the connection without a word";
  EXPECT_EQ(json_field(*said, "/error/code"), "runner_draining") << *said;
  EXPECT_TRUE(c.closed_by_peer());
}

// A clean stop removes the runner's cgroup parent from every hierarchy (a kill -9 leaves it;
// the harness removes it then).
TEST(RunnerLifecycle, CleanStopRemovesTheCgroupParent) {
  MOTOR_REQUIRE(geteuid() == 0, "starts a real runner; needs root");
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  auto job = runner.client({"run", "--", "/bin/true"});  // a job cgroup was made and removed under it
  ASSERT_EQ(job.exit_code, 0) << job.err;
  std::vector<std::string> parents;
  for (const char* h : {"unified", "memory", "pids", "cpuset", "freezer", "cpu", ""}) {
    const std::string dir = fmt::format("/sys/fs/cgroup/{}{}{}", h, *h ? "/" : "", runner.cgroup_parent());
    if (access(dir.c_str(), F_OK) == 0) parents.push_back(dir);
  }
  ASSERT_FALSE(parents.empty()) << "the runner made no cgroup parent";
  EXPECT_EQ(runner.stop(), 0);
  for (const auto& dir : parents) {
    std::string held;
    for (const auto& child : glob_paths(dir + "/*/")) held += " " + child;
    EXPECT_NE(access(dir.c_str(), F_OK), 0) << dir << " was left behind, holding:" << held;
  }
}

}  // namespace
}  // namespace motor::test
