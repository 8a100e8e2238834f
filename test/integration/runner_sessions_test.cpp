// Sessions: what a connection that left, never reads or never finishes a frame cannot do to
// other callers (issue 14: session handles, buffered totals, timeouts and caps, SIGHUP).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <sstream>
#include <thread>

#include "protocol/base64.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

constexpr uid_t kOtherUid = 4242;

bool protocol_is_job_id(const std::string& s) { return s.size() == 36 && s[8] == '-' && s[14] == '7'; }

std::string protocol_frame(const std::string& json) {
  const auto n = static_cast<uint32_t>(json.size());
  std::string f{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
  return f + json;
}  // an allowed account that is not the submitter

std::string run_frame(int id, const std::string& command, bool direct) {
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":{},"direct":{}}}}})", id, json_quote(command),
                     direct);
}

// The `motor` client run as another account (stdout and stderr kept).
CommandResult client_as(uid_t uid, gid_t gid, const std::string& socket, const std::vector<std::string>& args) {
  const std::string dir = make_temp_dir();
  chmod(dir.c_str(), 0777);
  const std::string out = dir + "/out", err = dir + "/err";
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) < 0 || setgid(gid) < 0 || setuid(uid) < 0) _exit(99);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    if (chdir(dir.c_str()) < 0) _exit(98);
    std::vector<std::string> argv{MOTOR_CLIENT_BIN, "--socket", socket};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execv(MOTOR_CLIENT_BIN, c.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  remove_tree(dir);
  return r;
}

// The runner's resident memory (VmRSS), in bytes.
int64_t rss_bytes(pid_t pid) {
  std::istringstream status(read_file(fmt::format("/proc/{}/status", pid)));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// A job that has written 4 MiB of output and then sleeps (20 s); its id, or "" if it did not.
std::string job_with_4mib_written(const RunnerProcess& runner, RawClient& owner) {
  const std::string written = runner.workspace("default") + "/written";
  if (!owner.send_frame(run_frame(1, "head -c 4194304 /dev/zero | tr '\\0' x; touch /workspace/written; sleep 20", false))) return "";
  auto accepted = owner.read_frame();
  if (!accepted) return "";
  for (int i = 0; i < 1000 && access(written.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(20ms);
  return access(written.c_str(), F_OK) == 0 ? json_field(*accepted, "/job_id") : "";
}

// `n` clients that attach to the job from its first record and never read.
std::vector<std::unique_ptr<RawClient>> silent_followers(const RunnerProcess& runner, const std::string& job, int n) {
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < n; ++i) {
    silent.push_back(std::make_unique<RawClient>(runner.socket()));
    EXPECT_TRUE(silent.back()->send_frame(fmt::format(R"({{"id":{},"method":"exec.attach","params":{{"job_id":"{}","from_seq":1}}}})", i, job)));
  }
  return silent;
}

class RunnerSessions : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    rlimit nofile{};
    getrlimit(RLIMIT_NOFILE, &nofile);
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // A runner another account (kOtherUid) may use too.
  std::unique_ptr<RunnerProcess> start_runner(const std::string& extra, std::vector<std::string> test_flags = {}) {
    auto r = std::make_unique<RunnerProcess>(fmt::format("allowed_uids = 0, {}\n{}", kOtherUid, extra));
    if (!test_flags.empty()) r->use_binary(MOTOR_RUNNER_TESTING_BIN, std::move(test_flags));
    if (!r->start()) {
      ADD_FAILURE() << "the runner did not start:\n" << r->log();
      return nullptr;
    }
    chmod(r->socket().c_str(), 0666);  // the other account is in no group of the socket
    return r;
  }
};

// Issue 14.1: a client submits a direct job and leaves before its `accepted` (which waits for
// the state save); connections that another account opens meanwhile may get the memory the
// gone session had. None of them may receive that job's records or its secret, or cancel it.
TEST_F(RunnerSessions, AJobsStreamNeverReachesAConnectionOpenedAfterItsClientLeft) {
  auto runner = start_runner("direct_jobs = true\n", {"--test-slow-state-save=400"});
  ASSERT_TRUE(runner);
  std::vector<std::string> jobs, leaked;
  for (int round = 0; round < 6; ++round) {
    const std::string marker = fmt::format("victim-output-{}-{}", round, unique_marker());
    {
      RawClient victim(runner->socket());
      ASSERT_TRUE(victim.send_frame(run_frame(1, "echo " + marker + "; sleep 1", true)));
    }  // gone before `accepted`
    std::vector<std::unique_ptr<RawClient>> others;
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(20ms);
      others.push_back(RawClient::as_account(runner->socket(), kOtherUid, kOtherUid));
      ASSERT_TRUE(others.back()) << "cannot connect as uid " << kOtherUid;
      ASSERT_TRUE(others.back()->send_frame(R"({"id":500,"method":"runner.hello"})"));
    }
    // Whatever each connection gets while the save completes and the job runs.
    const auto until = std::chrono::steady_clock::now() + 2000ms;
    for (auto& o : others) {
      for (std::optional<std::string> f; std::chrono::steady_clock::now() < until &&
                                         (f = o->read_frame(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              until - std::chrono::steady_clock::now())));) {
        if (json_field(*f, "/id") == "500") continue;  // its own hello
        leaked.push_back(*f);
        // With a leaked secret the other account could cancel the job: show that it cannot.
        const std::string job = json_field(*f, "/job_id"), secret = json_field(*f, "/secret");
        if (job[0] != '<' && secret[0] != '<') {
          o->send_frame(fmt::format(R"({{"id":600,"method":"exec.cancel","params":{{"job_id":"{}","secret":"{}"}}}})",
                                    job, secret));
        }
      }
    }
    // The job ran to its end, its output only in its own history.
    auto list = runner->client({"list", "--json"});
    for (size_t at = 0; (at = list.out.find("\"job_id\":\"", at)) != std::string::npos; at += 10) {
      const std::string id = list.out.substr(at + 10, 36);
      if (std::find(jobs.begin(), jobs.end(), id) == jobs.end()) jobs.push_back(id);
    }
  }
  EXPECT_TRUE(leaked.empty()) << leaked.size() << " records reached another account, the first: " << leaked.front();
  ASSERT_EQ(jobs.size(), 6u) << runner->log();
  for (const auto& id : jobs) {
    RawClient root(runner->socket());
    ASSERT_TRUE(root.send_frame(fmt::format(R"({{"id":1,"method":"exec.attach","params":{{"job_id":"{}","from_seq":1}}}})", id)));
    auto frames = read_until_terminal(root);
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(json_field(frames.back(), "/outcome/type"), "exit") << frames.back();
    EXPECT_EQ(json_field(frames.back(), "/outcome/code"), "0") << frames.back();
  }
}

// Issue 14.2: with --secret-file, a direct job's secret is in that file and nowhere else, also
// when --json prints every record on stdout.
TEST_F(RunnerSessions, JsonRunWithASecretFilePrintsTheSecretNowhereElse) {
  auto runner = start_runner("direct_jobs = true\n");
  ASSERT_TRUE(runner);
  const std::string path = runner->dir() + "/secret";
  auto r = runner->client({"run", "--json", "--direct", "--secret-file", path, "-c", "echo hi"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string secret = read_file(path);
  ASSERT_EQ(secret.size(), 65u) << secret;
  secret.pop_back();
  EXPECT_EQ(r.out.find(secret), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find(secret), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("\"secret\""), std::string::npos) << r.out;
  // The accepted record is still there, with everything else.
  const std::string accepted = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(json_field(accepted, "/type"), "accepted") << r.out;
  EXPECT_TRUE(protocol_is_job_id(json_field(accepted, "/job_id"))) << accepted;
}

// Issue 14.9: SIGHUP neither ends the runner nor its jobs.
TEST_F(RunnerSessions, SighupLeavesTheRunnerAndItsRunningJobAlone) {
  auto runner = start_runner("");
  ASSERT_TRUE(runner);
  RawClient c(runner->socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo before; sleep 1.5; echo after", false)));
  std::vector<std::string> frames;
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) frames.push_back(*f);
  ASSERT_EQ(kill(runner->pid(), SIGHUP), 0);
  auto rest = read_until_terminal(c);
  ASSERT_FALSE(rest.empty()) << "the stream ended without a terminal record; log:\n" << runner->log();
  EXPECT_EQ(json_field(rest.back(), "/type"), "terminal") << rest.back();
  EXPECT_EQ(json_field(rest.back(), "/outcome/type"), "exit") << rest.back();
  EXPECT_EQ(json_field(rest.back(), "/outcome/code"), "0") << rest.back();
  std::string out;
  for (const auto& f : rest) {
    if (json_field(f, "/type") == "output") out += protocol::base64_decode(json_field(f, "/bytes")).value_or("");
  }
  EXPECT_EQ(out, "after\n");
  RawClient again(runner->socket());
  ASSERT_TRUE(again.send_frame(R"({"id":2,"method":"runner.hello"})"));
  auto hello = again.read_frame();
  ASSERT_TRUE(hello) << runner->log();
  EXPECT_EQ(json_field(*hello, "/result/runner"), "motor-runner");
  EXPECT_NE(runner->log().find("SIGHUP"), std::string::npos);
}

// Issue 14.8: one account that opens many connections and sends only the 4-byte header of a
// frame cannot lock every other caller out: it gets at most max_sessions_per_uid of them, and
// each is closed after frame_timeout_s.
TEST_F(RunnerSessions, OneAccountHoldingHalfFramesCannotLockOutAnother) {
  RunnerProcess runner(fmt::format("allowed_uids = 0, {}, {}\nmax_sessions = 24\nmax_sessions_per_uid = 8\nframe_timeout_s = 2\n",
                                   kOtherUid, kOtherUid + 1));
  ASSERT_TRUE(runner.start()) << runner.log();
  chmod(runner.socket().c_str(), 0666);
  std::vector<std::unique_ptr<RawClient>> holders;
  for (int i = 0; i < 24; ++i) {
    holders.push_back(RawClient::as_account(runner.socket(), kOtherUid, kOtherUid));
    ASSERT_TRUE(holders.back());
    holders.back()->send_bytes(std::string("\x00\x00\x00\x40", 4));  // a 64-byte frame, never sent
  }
  std::this_thread::sleep_for(300ms);
  // Another account is served at once.
  auto other = RawClient::as_account(runner.socket(), kOtherUid + 1, kOtherUid + 1);
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->send_frame(R"({"id":1,"method":"runner.hello"})"));
  auto hello = other->read_frame(3000ms);
  ASSERT_TRUE(hello) << runner.log();
  EXPECT_EQ(json_field(*hello, "/result/runner"), "motor-runner") << *hello;
  // The holder got at most its share; the rest were refused as runner_full (transient).
  // The half frames are not held for ever: the sessions it got time out.
  size_t refused = 0, timed_out = 0;
  for (auto& h : holders) {
    auto f = h->read_frame(5000ms);
    ASSERT_TRUE(f) << "neither refused nor timed out";
    const std::string code = json_field(*f, "/error/code");
    refused += code == "runner_full";
    timed_out += code == "session_timeout";
    EXPECT_TRUE(h->closed_by_peer(3000ms));
  }
  EXPECT_EQ(refused, 16u);
  EXPECT_EQ(timed_out, 8u);
}

// Callers named by the SSH bridge all have the runner account's uid: the cap counts them by name.
TEST_F(RunnerSessions, BridgedCallersAreCappedByName) {
  RunnerProcess runner("max_sessions_per_uid = 2\n");
  ASSERT_TRUE(runner.start()) << runner.log();
  auto hello = [](RawClient& c) {
    c.send_frame(R"({"id":9,"method":"runner.hello"})");
    for (std::optional<std::string> f; (f = c.read_frame(3000ms));) {
      if (json_field(*f, "/id") == "9" || json_field(*f, "/error/code")[0] != '<') return *f;
    }
    return std::string("<nothing>");
  };
  std::vector<std::unique_ptr<RawClient>> alice;
  for (int i = 0; i < 2; ++i) {
    alice.push_back(RawClient::via_bridge(runner.socket(), "alice"));
    EXPECT_EQ(json_field(hello(*alice.back()), "/result/caller"), "alice");
  }
  auto third = RawClient::via_bridge(runner.socket(), "alice");
  EXPECT_EQ(json_field(hello(*third), "/error/code"), "runner_full");
  auto bob = RawClient::via_bridge(runner.socket(), "bob");
  EXPECT_EQ(json_field(hello(*bob), "/result/caller"), "bob");
}

TEST_F(RunnerSessions, AQuietConnectionIsClosedAndAFollowingOneIsNot) {
  RunnerProcess runner("session_idle_timeout_s = 1\n");
  ASSERT_TRUE(runner.start()) << runner.log();
  RawClient quiet(runner.socket());
  RawClient following(runner.socket());
  ASSERT_TRUE(following.send_frame(run_frame(1, "sleep 3; echo done", false)));
  auto f = quiet.read_frame(4000ms);
  ASSERT_TRUE(f);
  EXPECT_EQ(json_field(*f, "/error/code"), "session_timeout") << *f;
  EXPECT_TRUE(quiet.closed_by_peer());
  auto frames = read_until_terminal(following);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(json_field(frames.back(), "/outcome/code"), "0") << frames.back();
}

// Issue 14.14: clear answers and exit codes from the client.
TEST_F(RunnerSessions, AnAccountNotAllowedAlwaysGetsTheReasonAndExit77) {
  passwd* nobody = getpwnam("nobody");
  MOTOR_REQUIRE(nobody != nullptr, "needs the nobody account");
  auto runner = start_runner("");
  ASSERT_TRUE(runner);
  for (int i = 0; i < 20; ++i) {
    for (const auto& args : std::vector<std::vector<std::string>>{{"run", "-c", "true"}, {"list"}}) {
      auto r = client_as(nobody->pw_uid, nobody->pw_gid, runner->socket(), args);
      EXPECT_EQ(r.exit_code, 77) << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find("may not use the runner"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("Broken pipe"), std::string::npos) << r.err;
    }
  }
}

TEST_F(RunnerSessions, AFullRunnerIsATransientRefusal) {
  auto runner = start_runner("max_sessions = 1\n");
  ASSERT_TRUE(runner);
  std::this_thread::sleep_for(300ms);  // the start-up probe's session is gone
  RawClient holder(runner->socket());
  ASSERT_TRUE(holder.send_frame(R"({"id":1,"method":"runner.hello"})"));
  auto hello = holder.read_frame();
  ASSERT_TRUE(hello);
  ASSERT_EQ(json_field(*hello, "/result/runner"), "motor-runner") << *hello;
  for (const auto& args : std::vector<std::vector<std::string>>{{"run", "-c", "true"}, {"list"}, {"status"}}) {
    auto r = runner->client(args);
    EXPECT_EQ(r.exit_code, 75) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("runner_full"), std::string::npos) << r.err;
  }
}

TEST_F(RunnerSessions, AJobTheRunnersShutdownEndsIsNotReportedAsCtrlC) {
  auto runner = start_runner("max_running_jobs = 1\n");
  ASSERT_TRUE(runner);
  auto start_client = [&](const std::string& out, const std::string& command) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(MOTOR_CLIENT_BIN, MOTOR_CLIENT_BIN, "--socket", runner->socket().c_str(), "run", "--no-sync", "-c",
            command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  const std::string ws = runner->workspace("default");
  const pid_t running = start_client(runner->dir() + "/running.out", "touch /workspace/started; sleep 60");
  for (int i = 0; i < 500 && access((ws + "/started").c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(access((ws + "/started").c_str(), F_OK), 0) << runner->log();
  const pid_t queued = start_client(runner->dir() + "/queued.out", "true");
  std::this_thread::sleep_for(500ms);  // accepted, waiting for the running one
  EXPECT_EQ(runner->stop(), 0) << runner->log();
  auto exit_of = [](pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  EXPECT_EQ(exit_of(running), 71) << read_file(runner->dir() + "/running.out");
  EXPECT_EQ(exit_of(queued), 75) << read_file(runner->dir() + "/queued.out");
}

// Issue 14.7: clients that never read cannot take the runner's memory: per client and in total
// what is queued to them is bounded, and those that read nothing are cut off when the total is hit.
TEST_F(RunnerSessions, ClientsThatNeverReadAreBoundedInTotal) {
  auto runner = start_runner(
      "client_buffer_size = 64K\nclient_buffer_total = 4M\nmax_sessions = 4096\nmax_sessions_per_uid = 4096\n"
      "stalled_client_timeout_s = 1\n");
  ASSERT_TRUE(runner);
  RawClient owner(runner->socket());
  const std::string job = job_with_4mib_written(*runner, owner);
  ASSERT_FALSE(job.empty()) << runner->log();
  // 200 followers that never read, and 50 clients that send 400 requests each and read no reply.
  std::vector<std::unique_ptr<RawClient>> silent = silent_followers(*runner, job, 200);
  std::string requests;
  for (int i = 0; i < 400; ++i) requests += protocol_frame(fmt::format(R"({{"id":{},"method":"exec.list"}})", i));
  for (int i = 0; i < 50; ++i) {
    silent.push_back(std::make_unique<RawClient>(runner->socket()));
    ASSERT_TRUE(silent.back()->send_bytes(requests));
  }
  std::this_thread::sleep_for(1500ms);
  const std::string status = runner_status(*runner);
  ASSERT_NE(json_field(status, "/result/client_buffered_bytes")[0], '<') << status << runner->log();
  const int64_t buffered = std::stoll(json_field(status, "/result/client_buffered_bytes"));
  const int64_t peak = std::stoll(json_field(status, "/result/client_buffered_peak_bytes"));
  const int64_t rss = rss_bytes(runner->pid());
  RecordProperty("client_buffered_peak_bytes", std::to_string(peak));
  RecordProperty("runner_rss_bytes", std::to_string(rss));
  // The total (4 MiB), the replies' reserve past it (1 MiB: Runner::replies_have_room) and a
  // frame or so in flight.
  EXPECT_LE(buffered, int64_t{6} << 20) << status;
  EXPECT_LE(peak, int64_t{6} << 20) << status;
  EXPECT_LT(rss, int64_t{200} << 20);
  // A client that does read gets the whole output: the silent ones that hold the total are cut
  // off once they have read nothing for stalled_client_timeout_s.
  RawClient reader(runner->socket());
  ASSERT_TRUE(reader.send_frame(fmt::format(R"({{"id":1,"method":"exec.attach","params":{{"job_id":"{}","from_seq":1}}}})", job)));
  std::string out;
  for (std::optional<std::string> f; out.size() < (size_t{4} << 20) && (f = reader.read_frame(15000ms));) {
    if (json_field(*f, "/type") == "output") out += protocol::base64_decode(json_field(*f, "/bytes")).value_or("");
  }
  EXPECT_EQ(out.size(), size_t{4} << 20) << runner->log().substr(0, 4000);
  const std::string after = runner_status(*runner);
  EXPECT_LT(std::stoll(json_field(after, "/result/sessions")), 250) << after;  // some silent ones were cut off
  EXPECT_NE(runner->log().find("cut off"), std::string::npos);
}

// Output that fills client_buffer_total (followers that never read, none cut off for ten
// minutes) does not keep a request waiting: replies have a reserve past the total.
TEST_F(RunnerSessions, ARequestIsAnsweredWhileSilentFollowersHoldTheTotal) {
  auto runner = start_runner(
      "client_buffer_size = 64K\nclient_buffer_total = 1M\nmax_sessions = 4096\nmax_sessions_per_uid = 4096\n"
      "stalled_client_timeout_s = 600\n");
  ASSERT_TRUE(runner);
  RawClient owner(runner->socket());
  const std::string job = job_with_4mib_written(*runner, owner);
  ASSERT_FALSE(job.empty()) << runner->log();
  std::vector<std::unique_ptr<RawClient>> silent = silent_followers(*runner, job, 100);
  std::this_thread::sleep_for(1500ms);
  RawClient asker(runner->socket());
  ASSERT_TRUE(asker.send_frame(R"({"id":7,"method":"runner.status","params":{}})"));
  const auto status = asker.read_frame(5000ms);
  ASSERT_TRUE(status) << "no reply to runner.status" << runner->log().substr(0, 4000);
  EXPECT_GE(std::stoll(json_field(*status, "/result/client_buffered_bytes")), int64_t{1} << 20) << *status;  // the total is full
}

// Issue 14.7: a fan-out to many followers is spread over loop iterations, so the loop keeps
// serving everyone meanwhile (its worst stall, runner.status loop_worst_stall_us, stays short).
TEST_F(RunnerSessions, AFanOutIsFedInSlices) {
  auto runner = start_runner("max_sessions = 4096\nmax_sessions_per_uid = 4096\n");
  ASSERT_TRUE(runner);
  RawClient owner(runner->socket());
  ASSERT_TRUE(owner.send_frame(run_frame(1, "while [ ! -e /workspace/go ]; do sleep 0.05; done; head -c 1048576 /dev/zero | tr '\\0' x", false)));
  auto accepted = owner.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  std::vector<std::unique_ptr<RawClient>> followers;
  for (int i = 0; i < 300; ++i) {
    followers.push_back(std::make_unique<RawClient>(runner->socket()));
    ASSERT_TRUE(followers.back()->send_frame(fmt::format(R"({{"id":{},"method":"exec.attach","params":{{"job_id":"{}","from_seq":1}}}})", i, job)));
  }
  std::this_thread::sleep_for(500ms);
  runner_status(*runner, true);  // the worst stall so far is forgotten
  write_file(runner->workspace("default") + "/go", "");
  size_t complete = 0;
  for (auto& f : followers) {
    std::string out;
    auto frames = read_until_terminal(*f);
    for (const auto& fr : frames) {
      if (json_field(fr, "/type") == "output") out += protocol::base64_decode(json_field(fr, "/bytes")).value_or("");
    }
    complete += out.size() == (size_t{1} << 20) && !frames.empty() && json_field(frames.back(), "/outcome/code") == "0";
  }
  EXPECT_EQ(complete, 300u);
  const std::string status = runner_status(*runner);
  const int64_t stall_us = std::stoll(json_field(status, "/result/loop_worst_stall_us"));
  RecordProperty("loop_worst_stall_us", std::to_string(stall_us));
  EXPECT_LT(stall_us, 500000) << status;
}

}  // namespace
}  // namespace motor::test

namespace motor::test {
namespace {

// A burst read in one poll is answered a few requests per loop iteration (reactor::
// TurnsPerIteration, core test CoreTurns): what waits is still answered, each session's replies
// in the order it sent its requests, whatever the others send meanwhile.
TEST_F(RunnerSessions, ABurstOfRequestsIsAnsweredInOrderAFewPerLoopIteration) {
  auto runner = start_runner("max_running_jobs = 64\n");
  ASSERT_TRUE(runner);
  RawClient pipelined(runner->socket());
  std::vector<std::unique_ptr<RawClient>> runs;
  for (int i = 0; i < 20; ++i) runs.push_back(std::make_unique<RawClient>(runner->socket()));
  std::string burst;
  for (int id = 1; id <= 30; ++id) burst += protocol_frame(fmt::format(R"({{"id":{},"method":"runner.hello"}})", id));
  ASSERT_TRUE(pipelined.send_bytes(burst));  // thirty requests in one write
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(runs[static_cast<size_t>(i)]->send_frame(run_frame(i, "echo ran", false)));
  for (int id = 1; id <= 30; ++id) {
    auto reply = pipelined.read_frame();
    ASSERT_TRUE(reply) << "request " << id << " was not answered";
    EXPECT_EQ(json_field(*reply, "/id"), std::to_string(id)) << *reply;
  }
  for (auto& c : runs) {
    const auto frames = read_until_terminal(*c);
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(json_field(frames.front(), "/type"), "accepted") << frames.front();
    EXPECT_EQ(json_field(frames.back(), "/outcome/code"), "0") << frames.back();
  }
}

}  // namespace
}  // namespace motor::test
