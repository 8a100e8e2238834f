// Bad input never crashes the runner or disturbs other clients; peers are checked with
// SO_PEERCRED; the connect bridge names callers.
#include <gtest/gtest.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "protocol/frame.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

class RunnerProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    runner_ = std::make_unique<RunnerProcess>();
    ASSERT_TRUE(runner_->start()) << runner_->log();
    bystander_ = std::make_unique<RawClient>(runner_->socket());
    ASSERT_TRUE(bystander_->connected());
  }
  void TearDown() override {
    // Every test ends with the runner alive and still serving a client that did nothing wrong.
    if (runner_ && bystander_) {
      EXPECT_TRUE(bystander_->send_frame(R"({"id":99,"method":"runner.hello"})"));
      auto reply = bystander_->read_frame();
      ASSERT_TRUE(reply) << "the runner stopped serving others; log:\n" << runner_->log();
      EXPECT_EQ(json_field(*reply, "/result/runner"), "motor-runner");
    }
    bystander_.reset();
    runner_.reset();
  }

  std::string error_code_for(const std::string& payload) {
    RawClient c(runner_->socket());
    EXPECT_TRUE(c.send_frame(payload));
    auto reply = c.read_frame();
    if (!reply) return "<no reply>";
    return json_field(*reply, "/error/code");
  }

  std::unique_ptr<RunnerProcess> runner_;
  std::unique_ptr<RawClient> bystander_;
};

TEST_F(RunnerProtocol, HelloAnswersWithVersions) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"runner.hello","params":{}})"));
  auto reply = c.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/id"), "1");
  EXPECT_EQ(json_field(*reply, "/result/protocol"), "1");
  EXPECT_EQ(json_field(*reply, "/result/caller"), "root");
}

TEST_F(RunnerProtocol, OversizedFrameIsRefusedBeforeItIsReadAndTheConnectionClosed) {
  RawClient c(runner_->socket());
  // A header announcing 1 MiB + 1 and no body: the runner answers from the header alone.
  const std::string header = {'\x00', '\x10', '\x00', '\x01'};
  ASSERT_TRUE(c.send_bytes(header));
  auto reply = c.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/error/code"), "bad_request");
  EXPECT_NE(json_field(*reply, "/error/message").find("exceeds the limit"), std::string::npos);
  EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(RunnerProtocol, EmptyFrameBreaksTheFramingAndClosesTheConnection) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_bytes(std::string(4, '\0')));
  auto reply = c.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/error/code"), "bad_request");
  EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(RunnerProtocol, ATornFrameThenHangupLeavesTheRunnerServing) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_bytes(std::string("\x00\x00\x00\x40{\"id\":1,", 12)));
  // The client goes away mid-frame; TearDown checks the runner still serves others.
}

TEST_F(RunnerProtocol, MalformedRequestsGetBadRequestAndTheConnectionStaysUsable) {
  RawClient c(runner_->socket());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json at all", "valid JSON"},
      {"\"a string\"", "object"},
      {std::string("{\"id\":1,\"method\":\"runner.hello\",\"x\":\"\xff\xfe\"}"), "UTF-8"},
      {R"({"method":"runner.hello"})", "\"id\""},
      {R"({"id":"one","method":"runner.hello"})", "\"id\""},
      {R"({"id":1})", "\"method\""},
      {R"({"id":1,"method":42})", "\"method\""},
      {R"({"id":1,"method":"no.such.method"})", "unknown method"},
      {R"({"id":1,"method":"exec.run","params":[]})", "params"},
      {R"({"id":1,"method":"exec.run","params":{}})", "command"},
      {R"({"id":1,"method":"exec.run","params":{"command":5}})", "params.command"},
      {R"({"id":1,"method":"exec.run","params":{"command":"true","argv":["true"]}})", "not both"},
      {R"({"id":1,"method":"exec.run","params":{"argv":["a\u0000b"]}})", "NUL"},
      {R"({"id":1,"method":"exec.run","params":{"command":"true","timeout":-3}})", "timeout"},
      {R"({"id":1,"method":"exec.run","params":{"command":"true","env":{"A":1}}})", "env"},
      {R"({"id":1,"method":"exec.run","params":{"command":"true","memory":"lots"}})", "memory"},
      {R"({"id":1,"method":"exec.cancel","params":{"job_id":"../../etc"}})", "job id"},
      {R"({"id":1,"method":"exec.run","params":{"command":"true","cwd":"../../.."}})", ".."},
  };
  for (const auto& [payload, mention] : cases) {
    ASSERT_TRUE(c.send_frame(payload));
    auto reply = c.read_frame();
    ASSERT_TRUE(reply) << payload;
    EXPECT_EQ(json_field(*reply, "/error/code"), "bad_request") << payload << " -> " << *reply;
    EXPECT_NE(json_field(*reply, "/error/message").find(mention), std::string::npos) << payload << " -> " << *reply;
  }
  // The same connection still works.
  ASSERT_TRUE(c.send_frame(R"({"id":7,"method":"runner.hello"})"));
  auto ok = c.read_frame();
  ASSERT_TRUE(ok);
  EXPECT_EQ(json_field(*ok, "/id"), "7");
}

TEST_F(RunnerProtocol, AHugeCommandIsRefusedWithItsSize) {
  const std::string big(600 * 1024, 'x');
  EXPECT_EQ(error_code_for(fmt::format(R"({{"id":1,"method":"exec.run","params":{{"command":"{}"}}}})", big)),
            "bad_request");
}

TEST_F(RunnerProtocol, HostileWorkspaceKeysAreRefusedBeforeAnythingIsCreated) {
  for (const std::string& key : std::vector<std::string>{"..", "../escape", "a/b", ".hidden", std::string(200, 'k')}) {
    RawClient c(runner_->socket());
    ASSERT_TRUE(c.send_frame(fmt::format(R"({{"id":1,"method":"exec.run","params":{{"command":"true","workspace_key":"{}"}}}})", key)));
    auto reply = c.read_frame();
    ASSERT_TRUE(reply);
    EXPECT_EQ(json_field(*reply, "/type"), "terminal") << *reply;
    EXPECT_EQ(json_field(*reply, "/outcome/reason"), "workspace_key_rejected") << key;
    EXPECT_EQ(json_field(*reply, "/ran"), "none");
  }
  struct stat st {};
  EXPECT_NE(stat((runner_->state_dir() + "/workspaces/escape").c_str(), &st), 0);
  EXPECT_NE(stat((runner_->state_dir() + "/escape").c_str(), &st), 0);
}

// exec.attach and exec.status of an unknown job are refused; exec.cancel acknowledges it
// (exec-remote/v1: an idempotent tombstone, issue 17).
TEST_F(RunnerProtocol, UnknownJobsAreRefusedAsUnauthorizedButCancelIsAcknowledged) {
  RawClient c(runner_->socket());
  const std::string id = "01234567-89ab-7def-8123-456789abcdef";
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.attach","params":{"job_id":")" + id + R"("}})"));
  auto reply = c.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/error/code"), "unauthorized");
  ASSERT_TRUE(c.send_frame(R"({"id":2,"method":"exec.cancel","params":{"job_id":")" + id + R"("}})"));
  reply = c.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/result/job_id"), id) << *reply;
}

TEST_F(RunnerProtocol, WindowsAndOutboundNetworkAreRefusedNotSilentlyDowngraded) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true","network":"outbound"}})"));
  auto a = c.read_frame();
  ASSERT_TRUE(a);
  EXPECT_EQ(json_field(*a, "/outcome/reason"), "network_unsupported");
  ASSERT_TRUE(c.send_frame(R"({"id":2,"method":"exec.run","params":{"command":"true","platform":"windows"}})"));
  auto b = c.read_frame();
  ASSERT_TRUE(b);
  EXPECT_EQ(json_field(*b, "/outcome/reason"), "platform_unsupported");
}

// Runs `fn` in a child process as `nobody`; returns its exit code.
template <typename F>
int as_nobody(F fn) {
  passwd* pw = getpwnam("nobody");
  if (!pw) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) _exit(99);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(RunnerProtocol, SocketIsGroupOnly) {
  struct stat st {};
  ASSERT_EQ(stat(runner_->socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST_F(RunnerProtocol, PeerCredentialsAreCheckedEvenWhenTheSocketIsOpenedUp) {
  MOTOR_REQUIRE(getpwnam("nobody") != nullptr, "needs the nobody account");
  // An operator's mistake (a world-writable socket) must not let anyone in: SO_PEERCRED decides.
  ASSERT_EQ(chmod(runner_->socket().c_str(), 0666), 0);
  ASSERT_EQ(chmod(runner_->dir().c_str(), 0711), 0);
  const std::string socket = runner_->socket();
  const int code = as_nobody([&] {
    RawClient c(socket);
    if (!c.connected()) return 2;
    c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"touch /tmp/should-not-exist"}})");
    auto reply = c.read_frame();
    if (!reply) return 3;
    if (json_field(*reply, "/error/code") != "unauthorized") return 4;
    return c.closed_by_peer() ? 0 : 5;
  });
  EXPECT_EQ(code, 0);
  EXPECT_EQ(runner_->client({"list", "--json"}).out.find("should-not-exist"), std::string::npos);
}

TEST_F(RunnerProtocol, ConnectBridgeNamesTheCallerAndCarriesFrames) {
  // ssh runs `motor-runner connect --caller alice` as the runner's account; here, as root.
  int to_bridge[2], from_bridge[2];
  ASSERT_EQ(pipe(to_bridge), 0);
  ASSERT_EQ(pipe(from_bridge), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(to_bridge[0], 0);
    dup2(from_bridge[1], 1);
    close(to_bridge[1]);
    close(from_bridge[0]);
    execl(MOTOR_RUNNER_BIN, MOTOR_RUNNER_BIN, "connect", "--caller", "alice", "--socket", runner_->socket().c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_bridge[0]);
  close(from_bridge[1]);
  const std::string frame = protocol::encode_frame(R"({"id":5,"method":"runner.hello","params":{}})");
  ASSERT_EQ(write(to_bridge[1], frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  close(to_bridge[1]);  // EOF: the bridge half-closes, the runner answers, then closes
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(from_bridge[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(from_bridge[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_GT(got.size(), 4u);
  const std::string payload = got.substr(4);
  EXPECT_EQ(json_field(payload, "/id"), "5");
  EXPECT_EQ(json_field(payload, "/result/caller"), "alice");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(RunnerProtocol, OnlyTheRunnerAccountMayNameACaller) {
  MOTOR_REQUIRE(getpwnam("nobody") != nullptr, "needs the nobody account");
  // Let nobody in through allowed_uids is not needed: a refused identify is refused before that.
  ASSERT_EQ(chmod(runner_->socket().c_str(), 0666), 0);
  const std::string socket = runner_->socket();
  const int code = as_nobody([&] {
    RawClient c(socket);
    if (!c.connected()) return 2;
    c.send_frame(R"({"id":1,"method":"runner.identify","params":{"caller":"alice"}})");
    auto reply = c.read_frame();
    if (!reply) return 3;
    return json_field(*reply, "/error/code") == "unauthorized" ? 0 : 4;
  });
  EXPECT_EQ(code, 0);
}

TEST_F(RunnerProtocol, ManyClientsAtOnceAreAllServed) {
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(std::make_unique<RawClient>(runner_->socket()));
    ASSERT_TRUE(clients.back()->connected());
    ASSERT_TRUE(clients.back()->send_frame(fmt::format(R"({{"id":{},"method":"runner.hello"}})", i)));
  }
  for (int i = 0; i < 200; ++i) {
    auto reply = clients[static_cast<size_t>(i)]->read_frame();
    ASSERT_TRUE(reply);
    EXPECT_EQ(json_field(*reply, "/id"), std::to_string(i));
  }
}

}  // namespace
}  // namespace motor::test
