// Issue 17, the caller's side of exec-remote/v1: `motor exec-remote` played by a caller that has
// nothing but the vocabulary's JSON (every frame below is written by hand; no code of Motor's
// client is used), against a real runner. A real Git checkout with an uncommitted edit and an
// untracked file is prepared and run in, end to end, through --stdio and through --listen.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <string>
#include <thread>
#include <vector>

#include "protocol/base64.hpp"
#include "support/checkout_fixture.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

bool is_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-') || (!dash && !isxdigit(static_cast<unsigned char>(s[i])))) return false;
  }
  return true;
}

// Every frame up to the reply or terminal record of request `id` (others' frames kept too).
std::vector<std::string> frames_until(RawClient& c, int64_t id, std::chrono::milliseconds timeout = 90000ms) {
  std::vector<std::string> frames;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto f = c.read_frame(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    if (!f) break;
    frames.push_back(*f);
    if (json_field(*f, "/id") != std::to_string(id)) continue;
    if (json_field(*f, "/type") == "terminal" || json_field(*f, "/result") != "<missing>" ||
        json_field(*f, "/error") != "<missing>") {
      break;
    }
  }
  return frames;
}

std::string of_type(const std::vector<std::string>& frames, const std::string& type, int64_t id) {
  for (const auto& f : frames) {
    if (json_field(f, "/type") == type && json_field(f, "/id") == std::to_string(id)) return f;
  }
  return "";
}

// The bytes of every output record of `stream` for request `id`, in seq order (they arrive so).
std::string output_of(const std::vector<std::string>& frames, const std::string& stream, int64_t id) {
  std::string out;
  for (const auto& f : frames) {
    if (json_field(f, "/type") != "output" || json_field(f, "/stream") != stream || json_field(f, "/id") != std::to_string(id)) continue;
    auto bytes = protocol::base64_decode(json_field(f, "/bytes"));
    if (bytes) out += *bytes;
  }
  return out;
}

class ExecRemote : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override {
    return "printf 'committed\\n' > tracked.txt && mkdir -p sub && printf 'deep\\n' > sub/deep.txt";
  }
  void SetUp() override {
    CheckoutAndRunner::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    // The caller's working state: an uncommitted edit and an untracked file, both to be run with.
    write_file(repo_ + "/tracked.txt", "edited, not committed\n");
    write_file(repo_ + "/untracked.txt", "never added\n");
    head_ = sh(repo_, "git rev-parse HEAD");
    while (!head_.empty() && head_.back() == '\n') head_.pop_back();
  }
  std::unique_ptr<RawClient> stdio_endpoint() {
    return RawClient::via_program({MOTOR_CLIENT_BIN, "exec-remote", "--stdio", "--socket", runner_->socket()}, env_);
  }
  std::string run_request(int64_t id, const std::string& command, const std::string& cwd) const {
    return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"workspace_key":{},"repository_root":{},"cwd":{},)"
                       R"("command":{},"env":{{"RUST_BACKTRACE":"1"}},"timeout":60,"siblings":[]}}}})",
                       id, json_quote(repo_), json_quote(repo_), json_quote(cwd), json_quote(command));
  }
  std::string head_;
};

TEST_F(ExecRemote, StdioPreparesAndRunsACallersCheckoutEndToEnd) {
  auto caller = stdio_endpoint();
  ASSERT_TRUE(caller && caller->connected());
  // workspace.prepare as the vocabulary's caller sends it: a path, a base commit, no bundle.
  ASSERT_TRUE(caller->send_frame(fmt::format(
      R"({{"id":1,"method":"workspace.prepare","params":{{"workspace_key":{},"repository_root":{},"base_commit":"{}","siblings":[]}}}})",
      json_quote(repo_), json_quote(repo_), head_)));
  auto prepared = frames_until(*caller, 1);
  ASSERT_FALSE(prepared.empty());
  const std::string reply = prepared.back();
  EXPECT_EQ(json_field(reply, "/result/outcome/type"), "prepared") << reply;
  EXPECT_TRUE(is_uuid(json_field(reply, "/result/transfer_id"))) << reply;

  // A run in a subdirectory, named by its absolute path on the caller's machine.
  const std::string command =
      "cat ../tracked.txt ../untracked.txt deep.txt; printf 'to stderr\\n' >&2; printf '\\377\\376' ; echo made > ../made.txt";
  ASSERT_TRUE(caller->send_frame(run_request(2, command, repo_ + "/sub")));
  auto frames = frames_until(*caller, 2);
  const std::string accepted = of_type(frames, "accepted", 2);
  const std::string terminal = of_type(frames, "terminal", 2);
  ASSERT_NE(terminal, "") << (frames.empty() ? "no frames" : frames.back());
  EXPECT_TRUE(is_uuid(json_field(accepted, "/job_id"))) << accepted;
  EXPECT_EQ(json_field(terminal, "/job_id"), json_field(accepted, "/job_id"));
  // Byte-exact: the edit and the untracked file as they are on disk, a split of raw bytes too.
  EXPECT_EQ(output_of(frames, "stdout", 2), "edited, not committed\nnever added\ndeep\n\xff\xfe");
  EXPECT_EQ(output_of(frames, "stderr", 2), "to stderr\n");
  EXPECT_EQ(json_field(terminal, "/outcome"), R"({"type":"exit","code":0})") << terminal;
  EXPECT_EQ(json_field(terminal, "/ran"), "remote");
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), R"(["made.txt"])") << terminal;
  EXPECT_NE(json_field(terminal, "/tree_hash"), "null") << terminal;
  for (const char* field : {"/wall_ms", "/queue_wait_ms", "/bundle_bytes"}) EXPECT_NE(json_field(terminal, field), "<missing>") << field;
  // Nothing was copied back to the caller's checkout.
  EXPECT_NE(access((repo_ + "/made.txt").c_str(), F_OK), 0);
  EXPECT_EQ(read_file(repo_ + "/tracked.txt"), "edited, not committed\n");
}

TEST_F(ExecRemote, ARunThatCannotBeSnapshottedIsRefusedBeforeStart) {
  auto caller = stdio_endpoint();
  ASSERT_TRUE(caller && caller->connected());
  const std::string not_a_checkout = base_ + "/cache";
  sh(base_, "mkdir -p cache");
  ASSERT_TRUE(caller->send_frame(fmt::format(
      R"({{"id":5,"method":"exec.run","params":{{"workspace_key":{},"repository_root":{},"cwd":{},"command":"true"}}}})",
      json_quote(not_a_checkout), json_quote(not_a_checkout), json_quote(not_a_checkout))));
  auto frames = frames_until(*caller, 5);
  ASSERT_EQ(frames.size(), 1u) << "a refusal is the only record: no accepted";
  const std::string& t = frames[0];
  EXPECT_EQ(json_field(t, "/type"), "terminal") << t;
  EXPECT_EQ(json_field(t, "/outcome"), R"({"reason":"snapshot_failed","type":"refused_before_start"})") << t;
  EXPECT_EQ(json_field(t, "/ran"), "none");
  EXPECT_EQ(json_field(t, "/workspace_changes"), "null");
  EXPECT_EQ(json_field(t, "/retry_after_ms"), "<missing>") << "a lasting refusal: no retry hint";
  EXPECT_TRUE(is_uuid(json_field(t, "/job_id"))) << t;
  EXPECT_NE(json_field(t, "/refusal_detail").find("not inside a Git checkout"), std::string::npos) << t;
  // The same for a prepare: the vocabulary's prepare reply.
  ASSERT_TRUE(caller->send_frame(fmt::format(
      R"({{"id":6,"method":"workspace.prepare","params":{{"workspace_key":{},"repository_root":{},"base_commit":"{}"}}}})",
      json_quote(repo_), json_quote(repo_), std::string(40, 'e'))));
  auto reply = frames_until(*caller, 6);
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(json_field(reply.back(), "/result/outcome/reason"), "snapshot_failed") << reply.back();
  EXPECT_TRUE(is_uuid(json_field(reply.back(), "/result/transfer_id"))) << reply.back();
}

TEST_F(ExecRemote, ACancelOnTheSameSessionEndsTheRunningJob) {
  auto caller = stdio_endpoint();
  ASSERT_TRUE(caller && caller->connected());
  ASSERT_TRUE(caller->send_frame(run_request(1, "echo started; sleep 60", repo_)));
  std::string job;
  std::vector<std::string> seen;
  for (int i = 0; i < 20 && job.empty(); ++i) {
    auto f = caller->read_frame(30000ms);
    ASSERT_TRUE(f) << "no accepted record";
    seen.push_back(*f);
    if (json_field(*f, "/type") == "accepted") job = json_field(*f, "/job_id");
  }
  ASSERT_TRUE(is_uuid(job));
  // Wait for the job's first output: it is running.
  for (int i = 0; i < 20 && output_of(seen, "stdout", 1).empty(); ++i) {
    auto f = caller->read_frame(30000ms);
    ASSERT_TRUE(f);
    seen.push_back(*f);
  }
  ASSERT_TRUE(caller->send_frame(fmt::format(R"({{"id":2,"method":"exec.cancel","params":{{"job_id":"{}"}}}})", job)));
  auto rest = frames_until(*caller, 1);
  seen.insert(seen.end(), rest.begin(), rest.end());
  std::string cancel_reply;
  for (const auto& f : seen) {
    if (json_field(f, "/id") == "2") cancel_reply = f;
  }
  if (cancel_reply.empty()) {
    auto more = frames_until(*caller, 2, 10000ms);
    if (!more.empty()) cancel_reply = more.back();
  }
  EXPECT_EQ(json_field(cancel_reply, "/result/job_id"), job) << cancel_reply;
  const std::string terminal = of_type(seen, "terminal", 1);
  ASSERT_NE(terminal, "");
  EXPECT_EQ(json_field(terminal, "/killed"), "cancel") << terminal;
  EXPECT_EQ(json_field(terminal, "/ran"), "remote") << terminal;
}

TEST_F(ExecRemote, TheSocketFormServesOneAccountsCallers) {
  const std::string path = base_ + "/endpoint.sock";
  std::vector<std::string> env = env_;
  const pid_t pid = fork();
  if (pid == 0) {
    for (auto& e : env) putenv(e.data());
    execl(MOTOR_CLIENT_BIN, MOTOR_CLIENT_BIN, "exec-remote", "--listen", path.c_str(), "--socket", runner_->socket().c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;  // already waited for
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  struct stat st {};
  for (int i = 0; i < 100 && lstat(path.c_str(), &st) != 0; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(lstat(path.c_str(), &st), 0) << "the endpoint never listened";
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "one caller's: no one else may connect";
  {
    RawClient caller(path);
    ASSERT_TRUE(caller.connected());
    ASSERT_TRUE(caller.send_frame(run_request(3, "cat tracked.txt untracked.txt", repo_)));
    auto frames = frames_until(caller, 3);
    EXPECT_EQ(output_of(frames, "stdout", 3), "edited, not committed\nnever added\n");
    EXPECT_EQ(json_field(of_type(frames, "terminal", 3), "/outcome"), R"({"type":"exit","code":0})");
    // A status through the same endpoint, relayed.
    ASSERT_TRUE(caller.send_frame(R"({"id":4,"method":"exec.status","params":{}})"));
    auto status = frames_until(caller, 4);
    ASSERT_FALSE(status.empty());
    EXPECT_EQ(json_field(status.back(), "/result/server_reachable"), "true") << status.back();
  }
  // SIGTERM: the endpoint stops and takes its socket with it.
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  pid_t waited = 0;
  for (int i = 0; i < 100 && (waited = waitpid(pid, &status, WNOHANG)) == 0; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(waited, pid) << "the endpoint did not stop on SIGTERM";
  reaper.pid = 0;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(lstat(path.c_str(), &st), 0) << "the socket is removed at exit";
}

}  // namespace
}  // namespace motor::test
