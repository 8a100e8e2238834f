// motor-bb-runner played by bb_worker exactly: gRPC over the real runner.proto, a build directory
// laid out as bb_worker does, each action's results and files checked on disk.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

#include <fmt/format.h>

#include "bbrunner/bb_fixture.hpp"
#include "protocol/messages.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

class BbRunner : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "motor-bb-runner's integration tests run real sandboxes as root");
    farm_ = std::make_unique<BbFarm>("allowed_uids = 0, 4243\n", std::vector<std::string>{"--memory", "256M"});
    ASSERT_TRUE(farm_->start()) << farm_->runner().log() << farm_->bb_log();
  }
  // No process of the job is left and its cgroups are gone.
  void expect_nothing_left(const std::string& marker) {
    std::vector<pid_t> left;
    for (int i = 0; i < 500; ++i) {
      left = processes_with(marker);
      // Job cgroups only: the runner's sandboxes built ahead wait in one of their own.
      if (left.empty() && glob_paths("/sys/fs/cgroup/memory/" + farm_->runner().cgroup_parent() + "/job-*/").empty()) return;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << left.size() << " processes or a job cgroup of the action outlived it";
  }
  std::unique_ptr<BbFarm> farm_;
};

TEST_F(BbRunner, CheckReadinessAnswersFromTheBuildDirectoryAndTheRunnersDrainState) {
  EXPECT_TRUE(farm_->check_readiness().ok());
  farm_->make_action("ready");
  EXPECT_TRUE(farm_->check_readiness("ready/root").ok());
  EXPECT_FALSE(farm_->check_readiness("absent").ok());
  RawClient c(farm_->runner().socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"runner.drain"})"));
  ASSERT_TRUE(c.read_frame());
  const auto drained = farm_->check_readiness();
  EXPECT_EQ(drained.error_code(), grpc::StatusCode::UNAVAILABLE) << drained.error_message();
  ASSERT_TRUE(c.send_frame(R"({"id":2,"method":"runner.resume"})"));
  ASSERT_TRUE(c.read_frame());
  EXPECT_TRUE(farm_->check_readiness().ok());
}

TEST_F(BbRunner, AnActionRunsInItsInputRootWithOutputsLeftWhereItWroteThem) {
  auto a = farm_->make_action("compile", {{"src/main.c", "int main;\n"}});
  auto out = farm_->run(farm_->request(
      a, {"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; pwd; mkdir -p ../out && wc -c < main.c > ../out/size.txt"},
      {{"PATH", "/usr/bin:/bin"}}, "src"));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << farm_->bb_log();
  EXPECT_EQ(out.reply.exit_code(), 0);
  EXPECT_EQ(out.stdout_text, "to-stdout\n/workspace/src\n");
  EXPECT_EQ(out.stderr_text, "to-stderr\n");
  EXPECT_EQ(read_file(a.root() + "/out/size.txt"), "10\n");  // on the host, where bb_worker collects it
  ASSERT_TRUE(out.has_usage) << "no POSIXResourceUsage in the reply";
  EXPECT_GT(out.usage.maximum_resident_set_size(), 0);
  EXPECT_TRUE(out.usage.has_user_time() || out.usage.has_system_time());
  EXPECT_EQ(out.usage.termination_signal(), "");
  // The Motor job behind the action, for bb_worker's auxiliary metadata.
  ASSERT_TRUE(out.has_motor_job) << "no MotorJob in the reply";
  EXPECT_TRUE(protocol::is_job_id(out.motor_job.job_id())) << out.motor_job.job_id();
  EXPECT_NE(out.motor_job.terminal_record().find("\"type\":\"terminal\""), std::string::npos) << out.motor_job.terminal_record();
  EXPECT_NE(out.motor_job.terminal_record().find(out.motor_job.job_id()), std::string::npos) << out.motor_job.terminal_record();
}

TEST_F(BbRunner, FailuresAndSignalsAreReportedAsBbRunnerDoes) {
  auto a = farm_->make_action("fails");
  auto out = farm_->run(farm_->request(a, {"/bin/sh", "-c", "echo nope >&2; exit 3"}));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.reply.exit_code(), 3);
  EXPECT_EQ(out.stderr_text, "nope\n");
  auto b = farm_->make_action("aborts");
  auto sig = farm_->run(farm_->request(b, {"/bin/sh", "-c", "kill -SEGV $$"}));
  ASSERT_TRUE(sig.status.ok()) << sig.status.error_message();
  EXPECT_EQ(sig.reply.exit_code(), -1);
  EXPECT_EQ(sig.usage.termination_signal(), "SEGV");
  auto c = farm_->make_action("missing");
  auto missing = farm_->run(farm_->request(c, {"no-such-tool"}));
  EXPECT_TRUE(!missing.status.ok() || missing.reply.exit_code() != 0);
}

TEST_F(BbRunner, TheEnvironmentIsPassedAsGivenAndTheTemporaryDirectoryIsTmp) {
  auto a = farm_->make_action("env");
  auto out = farm_->run(farm_->request(a, {"/bin/sh", "-c", "env | sort | grep -v '^PWD=' ; echo scratch > /tmp/t; ls -d /tmp/t"},
                                       {{"PATH", "/usr/bin:/bin"}, {"API_TOKEN", "hermetic"}, {"CC", "gcc"}}));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  // Exactly the action's variables: no HOME, USER or LANG of the runner's, none filtered out.
  EXPECT_EQ(out.stdout_text, "API_TOKEN=hermetic\nCC=gcc\nPATH=/usr/bin:/bin\n/tmp/t\n");
  EXPECT_EQ(read_file(a.tmp() + "/t"), "scratch\n");
}

TEST_F(BbRunner, AnActionOverItsMemoryIsKilled) {
  auto a = farm_->make_action("balloon");
  // Whichever process the kernel kills, the action cannot finish: no "complete", a failing exit.
  auto out = farm_->run(farm_->request(
      a, {"/bin/sh", "-c", "x=$(head -c 600000000 /dev/zero | tr '\\0' a) && [ ${#x} -eq 600000000 ] && echo complete"}));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_NE(out.reply.exit_code(), 0);
  EXPECT_EQ(out.stdout_text, "");
  EXPECT_LE(out.usage.maximum_resident_set_size(), int64_t{256} << 20);
  EXPECT_GT(out.usage.maximum_resident_set_size(), int64_t{64} << 20);
  ASSERT_TRUE(out.has_motor_job) << "no MotorJob in the reply";
  EXPECT_NE(out.motor_job.terminal_record().find("\"oom_killed\":true"), std::string::npos) << out.motor_job.terminal_record();
}

TEST_F(BbRunner, AnActionPastItsDeadlineIsKilledWithEverythingItStarted) {
  const std::string marker = unique_marker();
  auto a = farm_->make_action("slow");
  auto out = farm_->run(farm_->request(a, {"/bin/sh", "-c", "(sleep 300 &) ; sleep 300; echo " + marker}), 2s);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << out.status.error_message();
  expect_nothing_left(marker);
}

TEST_F(BbRunner, ACancelledCallCancelsTheJob) {
  const std::string marker = unique_marker();
  auto a = farm_->make_action("cancelled");
  grpc::ClientContext ctx;
  std::thread cancel([&] {
    for (int i = 0; i < 500 && processes_with(marker).empty(); ++i) std::this_thread::sleep_for(10ms);
    ctx.TryCancel();
  });
  auto out = farm_->run(farm_->request(a, {"/bin/sh", "-c", "sleep 300; echo " + marker}), 120s, false, &ctx);
  cancel.join();
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED) << out.status.error_message();
  expect_nothing_left(marker);
}

// The gate's attacks that apply to an action: each must be stopped.
TEST_F(BbRunner, AttackEscapingTheInputRootThroughASymlinkIsRefused) {
  auto planted = farm_->make_action("planted");
  ASSERT_EQ(symlink("/etc", (planted.root() + "/escape").c_str()), 0);
  const std::string outside = make_temp_dir();  // a host directory outside the build directory
  ASSERT_EQ(symlink(outside.c_str(), (planted.path + "/logs").c_str()), 0);
  // An input root reached through the symlink an earlier action left.
  auto r = farm_->request(planted, {"/bin/true"});
  r.set_input_root_directory("planted/root/escape");
  r.set_stdout_path("planted/out1");
  r.set_stderr_path("planted/err1");
  auto out = farm_->run(r);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << out.status.error_message();
  // Stopped where the path is resolved (openat2), not only by the sandbox plan's later check.
  EXPECT_NE(out.status.error_message().find("a component is a symlink"), std::string::npos) << out.status.error_message();
  // stdout through a symlink to a host directory: no file appears there.
  auto s = farm_->request(planted, {"/bin/true"});
  s.set_stdout_path("planted/logs/motor-bb-attack");
  auto log = farm_->run(s);
  EXPECT_EQ(log.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  struct stat st {};
  EXPECT_NE(lstat((outside + "/motor-bb-attack").c_str(), &st), 0) << "stdout followed a planted symlink out of the build directory";
  remove_tree(outside);
  // ".." out of the build directory.
  auto u = farm_->request(planted, {"/bin/true"});
  u.set_input_root_directory("../..");
  u.set_stdout_path("planted/out2");
  u.set_stderr_path("planted/err2");
  EXPECT_EQ(farm_->run(u).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(BbRunner, AttackReadingHostFilesFindsNothing) {
  auto other = farm_->make_action("other", {{"secret.txt", "another action's input\n"}});
  auto a = farm_->make_action("reader");
  auto out = farm_->run(farm_->request(
      a, {"/bin/sh", "-c",
          "cat /etc/shadow; ls /root; cat ../other/root/secret.txt ../../other/root/secret.txt; "
          "ls " + farm_->build_dir() + "; find / -name secret.txt -print 2>/dev/null; exit 0"}));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.stdout_text, "") << "the action read host files";
  EXPECT_NE(out.stderr_text.find("shadow"), std::string::npos);
}

TEST_F(BbRunner, AttackReachingTheNetworkFails) {
  // A listener on the host's loopback: an offline action must not reach it.
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  auto a = farm_->make_action("net");
  auto out = farm_->run(farm_->request(
      a, {"/bin/bash", "-c", fmt::format("echo hi > /dev/tcp/127.0.0.1/{} && echo reached; ls /sys/class/net", ntohs(addr.sin_port))}));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.stdout_text.find("reached"), std::string::npos);
  pollfd p{listener, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "the action connected to the host's loopback";
  close(listener);
  // The outbound socket: refused while the runner does not allow outbound network.
  auto b = farm_->make_action("outbound");
  auto refused = farm_->run(farm_->request(b, {"/bin/true"}), 30s, true);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.status.error_message();
}

TEST_F(BbRunner, OnlyATrustedCallerNamesAHostDirectory) {
  auto a = farm_->make_action("untrusted");
  chmod(farm_->runner().socket().c_str(), 0666);  // the other account (allowed_uids) is in no group of the socket
  auto c = RawClient::as_account(farm_->runner().socket(), 4243, 4243);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send_frame(fmt::format(
      R"({{"id":1,"method":"exec.run","params":{{"argv":["/bin/true"],"host_workspace":{{"input_root":"{}/root"}}}}}})", a.name)));
  auto reply = c->read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/error/code"), "unauthorized") << *reply;
}

}  // namespace
}  // namespace motor::test
