// Attach, replay and resume; direct jobs and their one-time secrets.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <map>
#include <set>
#include <thread>

#include "base/job_id.hpp"
#include "protocol/base64.hpp"
#include "support/runner_harness.hpp"
#include "support/state_text.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

struct Stream {
  std::vector<std::string> frames;
  std::string terminal;
  std::string stdout_bytes;
  std::vector<int64_t> seqs;
};

// Reads frames until the terminal record (or an error reply, or a timeout).
Stream read_stream(RawClient& c, std::chrono::milliseconds timeout = 30000ms) {
  Stream s;
  for (;;) {
    auto f = c.read_frame(timeout);
    if (!f) break;
    s.frames.push_back(*f);
    const std::string type = json_field(*f, "/type");
    const std::string seq = json_field(*f, "/seq");
    if (seq[0] != '<') s.seqs.push_back(std::stoll(seq));
    if (type == "output" && json_field(*f, "/stream") == "stdout") {
      s.stdout_bytes += protocol::base64_decode(json_field(*f, "/bytes")).value_or("");
    }
    if (type == "terminal" || json_field(*f, "/error/code")[0] != '<') {
      s.terminal = *f;
      break;
    }
  }
  return s;
}

std::string run_frame(int id, const std::string& command, bool direct) {
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":{},"direct":{}}}}})", id, json_quote(command),
                     direct);
}

std::string attach_frame(int id, const std::string& job, int64_t from, const std::string& secret = "") {
  if (secret.empty()) return fmt::format(R"({{"id":{},"method":"exec.attach","params":{{"job_id":"{}","from_seq":{}}}}})", id, job, from);
  return fmt::format(R"({{"id":{},"method":"exec.attach","params":{{"job_id":"{}","from_seq":{},"secret":"{}"}}}})", id, job,
                     from, secret);
}

// Every file under a directory, concatenated (to search for a leaked secret).
std::string all_files_under(const std::string& dir) {
  auto r = run_program({"/usr/bin/find", dir, "-type", "f", "-exec", "/bin/cat", "{}", "+"});
  return r.out;
}

class RunnerAttach : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    rlimit nofile{};
    getrlimit(RLIMIT_NOFILE, &nofile);
    nofile.rlim_cur = nofile.rlim_max;  // the fan-out test opens ~1,100 sockets
    setrlimit(RLIMIT_NOFILE, &nofile);
    runner_ = std::make_unique<RunnerProcess>("direct_jobs = true\nmax_sessions = 4096\n");
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override { runner_.reset(); }

  // Alice submits a direct job through the bridge; returns {job_id, secret}.
  std::pair<std::string, std::string> submit_direct(const std::string& command) {
    auto alice = RawClient::via_bridge(runner_->socket(), "alice");
    EXPECT_TRUE(alice->send_frame(run_frame(1, command, true)));
    auto accepted = alice->read_frame();
    EXPECT_TRUE(accepted);
    if (!accepted) return {};
    EXPECT_EQ(json_field(*accepted, "/type"), "accepted") << *accepted;
    return {json_field(*accepted, "/job_id"), json_field(*accepted, "/secret")};
  }

  std::unique_ptr<RunnerProcess> runner_;
};

TEST_F(RunnerAttach, direct_secret_reattaches_replays_and_never_leaks) {
  auto [job, secret] = submit_direct("for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done");
  ASSERT_EQ(secret.size(), 64u);  // 256 bits, hex
  // Alice's connection is gone (the bridge closed). Bob holds only the secret.
  auto bob = RawClient::via_bridge(runner_->socket(), "bob");
  ASSERT_TRUE(bob->send_frame(attach_frame(7, job, 1, secret)));
  Stream s = read_stream(*bob);
  EXPECT_EQ(s.stdout_bytes, "line 1\nline 2\nline 3\nline 4\nline 5\n");
  EXPECT_EQ(json_field(s.terminal, "/outcome/type"), "exit");
  EXPECT_EQ(s.seqs.front(), 1);
  // The plaintext is nowhere: not in what Bob got, the state dir, the runner's log, status, list.
  for (const auto& f : s.frames) EXPECT_EQ(f.find(secret), std::string::npos) << f;
  EXPECT_EQ(all_files_under(runner_->state_dir()).find(secret), std::string::npos);
  EXPECT_EQ(runner_->log().find(secret), std::string::npos);
  EXPECT_EQ(runner_->client({"status", job, "--json"}).out.find(secret), std::string::npos);
  EXPECT_EQ(runner_->client({"list", "--json"}).out.find(secret), std::string::npos);
  // Only its digest is kept.
  EXPECT_NE(state_text(runner_->state_dir()).find("\"secret_sha256\""), std::string::npos);
}

TEST_F(RunnerAttach, WrongSecretAndUnknownJobGetIdenticalRefusals) {
  auto [job, secret] = submit_direct("true");
  auto bob = RawClient::via_bridge(runner_->socket(), "bob");
  const std::string wrong(64, 'a');
  ASSERT_TRUE(bob->send_frame(attach_frame(3, job, 1, wrong)));
  auto a = bob->read_frame();
  ASSERT_TRUE(bob->send_frame(attach_frame(3, "01234567-89ab-7def-8123-456789abcdef", 1, wrong)));
  auto b = bob->read_frame();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(json_field(*a, "/error/code"), "unauthorized");
  EXPECT_EQ(*a, *b);  // same code, same message, same fields
  // And without any secret at all, the same again.
  ASSERT_TRUE(bob->send_frame(attach_frame(3, job, 1)));
  auto c = bob->read_frame();
  ASSERT_TRUE(c);
  EXPECT_EQ(*a, *c);
}

TEST_F(RunnerAttach, ASecretOpensItsOwnJobAndNoOther) {
  auto [job_a, secret_a] = submit_direct("echo a");
  auto [job_b, secret_b] = submit_direct("echo b");
  auto bob = RawClient::via_bridge(runner_->socket(), "bob");
  ASSERT_TRUE(bob->send_frame(attach_frame(1, job_b, 1, secret_a)));
  auto refused = bob->read_frame();
  ASSERT_TRUE(refused);
  EXPECT_EQ(json_field(*refused, "/error/code"), "unauthorized");
  ASSERT_TRUE(bob->send_frame(attach_frame(2, job_a, 1, secret_a)));
  EXPECT_EQ(read_stream(*bob).stdout_bytes, "a\n");
  // Status and cancel take the secret too.
  ASSERT_TRUE(bob->send_frame(fmt::format(R"({{"id":3,"method":"exec.status","params":{{"job_id":"{}","secret":"{}"}}}})", job_b, secret_b)));
  auto status = bob->read_frame();
  ASSERT_TRUE(status);
  EXPECT_EQ(json_field(*status, "/result/job_id"), job_b);
}

TEST_F(RunnerAttach, DirectJobsAreRefusedWhenTheRunnerDoesNotAllowThem) {
  RunnerProcess plain;
  ASSERT_TRUE(plain.start());
  RawClient c(plain.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "true", true)));
  auto reply = c.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(json_field(*reply, "/error/code"), "bad_request");
  EXPECT_NE(json_field(*reply, "/error/message").find("direct_jobs"), std::string::npos);
}

TEST_F(RunnerAttach, secret_file_is_private_new_and_never_overwrites) {
  const std::string path = runner_->dir() + "/secret";
  auto r = runner_->client({"run", "--direct", "--secret-file", path, "-c", "echo hi"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string secret = read_file(path);
  ASSERT_EQ(secret.size(), 65u);  // 64 hex digits and a newline
  EXPECT_EQ(r.err.find(secret.substr(0, 64)), std::string::npos);  // not printed when a file is asked for
  // An existing file is never overwritten, and a symlink is never followed.
  auto again = runner_->client({"run", "--direct", "--secret-file", path, "-c", "echo hi"});
  EXPECT_EQ(again.exit_code, 64);
  EXPECT_EQ(read_file(path), secret);
  const std::string link = runner_->dir() + "/link";
  ASSERT_EQ(symlink((runner_->dir() + "/target").c_str(), link.c_str()), 0);
  auto via_link = runner_->client({"run", "--direct", "--secret-file", link, "-c", "echo hi"});
  EXPECT_EQ(via_link.exit_code, 64);
  EXPECT_NE(lstat((runner_->dir() + "/target").c_str(), &st), 0);
  // Without a file, the secret is shown once on stderr.
  auto shown = runner_->client({"run", "--direct", "-c", "true"});
  EXPECT_NE(shown.err.find("secret"), std::string::npos);
}

TEST_F(RunnerAttach, attach_never_accepts_an_argv_secret_or_echoes_it) {
  auto [job, secret] = submit_direct("true");
  for (const auto& args : std::vector<std::vector<std::string>>{{"attach", job, "--secret", "SECRETVALUE123"},
                                                                {"attach", job, "--secret=SECRETVALUE123"},
                                                                {"status", job, "--secret", "SECRETVALUE123"},
                                                                {"cancel", "--secret=SECRETVALUE123", job}}) {
    auto r = runner_->client(args);
    EXPECT_EQ(r.exit_code, 64);
    EXPECT_EQ(r.err.find("SECRETVALUE123"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("SECRETVALUE123"), std::string::npos);
    EXPECT_NE(r.err.find("--secret-file"), std::string::npos);
  }
  // From a file it works (root needs none, but a given secret must not break anything).
  const std::string path = runner_->dir() + "/s";
  write_file(path, secret + "\n");
  EXPECT_EQ(runner_->client({"attach", job, "--secret-file", path}).exit_code, 0);
}

TEST_F(RunnerAttach, ResumeFromAMidStreamSeqGivesExactlyTheMissingRecords) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "for i in $(seq 20); do echo $i; sleep 0.02; done", false)));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  Stream all = read_stream(c);
  ASSERT_GE(all.seqs.size(), 4u);
  for (size_t i = 0; i < all.seqs.size(); ++i) EXPECT_EQ(all.seqs[i], static_cast<int64_t>(i + 1));  // contiguous from 1
  const int64_t from = all.seqs[all.seqs.size() / 2];
  RawClient again(runner_->socket());
  ASSERT_TRUE(again.send_frame(attach_frame(9, job, from)));
  Stream rest = read_stream(again);
  std::vector<int64_t> expected(all.seqs.begin() + (from - 1), all.seqs.end());
  EXPECT_EQ(rest.seqs, expected);
  // Replayed records are the same records (only the request id differs).
  for (size_t i = 0; i < rest.frames.size(); ++i) {
    EXPECT_EQ(rest.frames[i].substr(rest.frames[i].find(',')), all.frames[static_cast<size_t>(from - 1) + i].substr(all.frames[static_cast<size_t>(from - 1) + i].find(',')));
  }
}

TEST_F(RunnerAttach, AThousandAttachersEachGetEveryByteAndAStalledOneSlowsNoOne) {
  // The job prints 128 KiB quickly; it waits until the attachers are in place.
  const std::string marker = runner_->dir() + "/go";
  RawClient owner(runner_->socket());
  ASSERT_TRUE(owner.send_frame(run_frame(1, "while [ ! -e /workspace/go ]; do sleep 0.05; done; head -c 131072 /dev/zero | tr '\\0' x", false)));
  auto accepted = owner.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  RawClient stalled(runner_->socket());
  ASSERT_TRUE(stalled.send_frame(attach_frame(1, job, 1)));  // and never read
  std::vector<std::unique_ptr<RawClient>> attachers;
  for (int i = 0; i < 1000; ++i) {
    attachers.push_back(std::make_unique<RawClient>(runner_->socket()));
    ASSERT_TRUE(attachers.back()->connected()) << i;
    ASSERT_TRUE(attachers.back()->send_frame(attach_frame(i, job, 1)));
  }
  write_file(runner_->workspace("default") + "/go", "");
  size_t complete = 0;
  for (auto& a : attachers) {
    Stream s = read_stream(*a);
    complete += s.stdout_bytes == std::string(131072, 'x') && json_field(s.terminal, "/outcome/code") == "0";
  }
  EXPECT_EQ(complete, 1000u);
  EXPECT_EQ(read_stream(owner).stdout_bytes, std::string(131072, 'x'));
  (void)marker;
}

TEST_F(RunnerAttach, TruncatedHistoryIsReportedOnce) {
  RunnerProcess small("job_log_max_size = 64K\n");
  ASSERT_TRUE(small.start());
  RawClient c(small.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "head -c 1048576 /dev/zero", false)));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  read_stream(c);
  RawClient late(small.socket());
  ASSERT_TRUE(late.send_frame(attach_frame(2, job, 1)));
  Stream s = read_stream(late);
  ASSERT_FALSE(s.frames.empty());
  const std::string first_truncated = json_field(s.frames.front(), "/truncated_before_seq");
  EXPECT_NE(first_truncated[0], '<') << s.frames.front().substr(0, 200);
  EXPECT_GT(s.seqs.front(), 1);
  size_t reported = 0;
  for (const auto& f : s.frames) reported += f.find("truncated_before_seq") != std::string::npos;
  EXPECT_EQ(reported, 1u);
  EXPECT_EQ(json_field(s.terminal, "/outcome/code"), "0");
}

TEST_F(RunnerAttach, ExpiredHistoryAnswersHistoryExpired) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo gone", false)));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  read_stream(c);
  ASSERT_EQ(runner_->stop(), 0);
  run_program({"/bin/rm", "-rf", runner_->state_dir() + "/jobs/" + job});
  ASSERT_TRUE(runner_->start());
  auto r = runner_->client({"attach", job, "--json"});
  EXPECT_NE(r.out.find("\"history_expired\""), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 70);
}

TEST_F(RunnerAttach, AttachAfterARestartReplaysAFinishedJob) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo before restart", false)));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  read_stream(c);
  ASSERT_EQ(runner_->stop(), 0);
  ASSERT_TRUE(runner_->start());
  auto r = runner_->client({"attach", job});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "before restart\n");
}

}  // namespace
}  // namespace motor::test

namespace motor::test {
namespace {

TEST_F(RunnerAttach, HistoryOlderThanItsAgeAnswersHistoryExpired) {
  RunnerProcess aging("job_log_max_age_s = 1\n");
  ASSERT_TRUE(aging.start());
  RawClient c(aging.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo old", false)));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  read_stream(c);
  EXPECT_EQ(aging.client({"attach", job}).out, "old\n");  // still there
  std::this_thread::sleep_for(2500ms);                     // the sweep runs every ~0.5 s here
  auto r = aging.client({"attach", job, "--json"});
  EXPECT_NE(r.out.find("\"history_expired\""), std::string::npos) << r.out;
  EXPECT_EQ(json_field(aging.client({"status", job, "--json"}).out, "/result/state"), "finished");  // the record stays
}

// The sweep of old histories in a table of 10,000 finished jobs (seeded as an upgraded host's
// state.json): exactly the 5,000 that ended before the age limit lose their history, the 5,000
// newer ones keep theirs, and every record stays. The sweep visits jobs by their end (the
// table's index) from the start on, 256 per loop iteration: the 5,000 take twenty sweeps.
TEST_F(RunnerAttach, TheHistorySweepDeletesExactlyTheHistoriesPastTheirAgeAmongTenThousandJobs) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "true", false)));
  const std::string terminal = read_stream(c).terminal;
  ASSERT_EQ(json_field(terminal, "/type"), "terminal") << terminal;
  const std::string model_id = json_field(terminal, "/job_id");
  RunnerProcess seeded("job_log_max_age_s = 3600\nfinished_jobs_kept = 20000\n");
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  std::set<std::string> old_ids, new_ids;
  std::string text = R"({"version":1,"draining":false,"jobs":[)";
  ASSERT_EQ(mkdir(seeded.state_dir().c_str(), 0700), 0);
  ASSERT_EQ(mkdir((seeded.state_dir() + "/jobs").c_str(), 0700), 0);
  for (int i = 0; i < 10000; ++i) {
    auto id = motor::new_job_id();
    ASSERT_TRUE(id);
    const bool old = i % 2 == 0;  // interleaved by id: the ids' order says nothing of the end
    (old ? old_ids : new_ids).insert(*id);
    std::string t = terminal;
    t.replace(t.find(model_id), model_id.size(), *id);
    if (i) text.push_back(',');
    // A restored job's end is its creation time (job.cpp): two hours ago, or now.
    const int64_t created = old ? now_ms - 2 * 3600 * 1000 : now_ms;
    text += fmt::format(R"({{"job_id":"{}","caller":"root","workspace_key":"default","summary":"true","state":"finished",)"
                        R"("cgroup":"","created_at_ms":{},"started_at_ms":{},"terminal":{}}})",
                        *id, created, created, t);
    const std::string dir = seeded.state_dir() + "/jobs/" + *id;
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
    write_file(dir + "/log.0", "");
  }
  write_file(seeded.state_dir() + "/state.json", text + "]}\n");
  ASSERT_TRUE(seeded.start());
  auto history_left = [&](const std::set<std::string>& ids) {
    size_t n = 0;
    for (const auto& id : ids) n += access((seeded.state_dir() + "/jobs/" + id).c_str(), F_OK) == 0;
    return n;
  };
  for (int i = 0; i < 600 && history_left(old_ids) > 0; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(history_left(old_ids), 0u);
  EXPECT_EQ(history_left(new_ids), new_ids.size());
  RawClient status(seeded.socket());
  EXPECT_EQ(json_field(call_method(status, 1, "runner.status", "{}"), "/result/jobs_known"), "10000");
  const std::string an_old = *old_ids.begin();
  auto attached = seeded.client({"attach", an_old, "--json"});
  EXPECT_NE(attached.out.find("\"history_expired\""), std::string::npos) << attached.out;
  EXPECT_EQ(json_field(seeded.client({"status", an_old, "--json"}).out, "/result/state"), "finished");
  EXPECT_EQ(seeded.stop(), 0);
}

TEST_F(RunnerAttach, RunReattachesByItselfAndNeverRerunsTheJob) {
  // The job leaves one line per run in its workspace; the runner dies mid-job and comes back.
  const std::string ws = runner_->workspace("default");
  pid_t client = fork();
  if (client == 0) {
    const int out = ::open((runner_->dir() + "/client.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(out, 2);
    execl(MOTOR_CLIENT_BIN, MOTOR_CLIENT_BIN, "--socket", runner_->socket().c_str(), "run", "--no-sync", "-c",
          "echo ran >> /workspace/runs; echo started; sleep 30", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500 && read_file(ws + "/runs").empty(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(read_file(ws + "/runs"), "ran\n");
  std::this_thread::sleep_for(200ms);
  runner_->kill9();
  ASSERT_TRUE(runner_->start());
  int status = 0;
  for (int i = 0; i < 1000 && waitpid(client, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(runner_->dir() + "/client.out");
  EXPECT_EQ(WEXITSTATUS(status), 71);  // outcome_unknown: the job died with the runner (not 130, not 70)
  const std::string out = read_file(runner_->dir() + "/client.out");
  EXPECT_NE(out.find("outcome is unknown"), std::string::npos) << out;
  EXPECT_EQ(read_file(ws + "/runs"), "ran\n");  // exactly once
  EXPECT_EQ(out.find("started\nstarted"), std::string::npos);  // and no record twice
}

}  // namespace
}  // namespace motor::test

namespace motor::test {
namespace {

TEST_F(RunnerAttach, AStalledFollowerIsDroppedWithAnErrorItSeesWhenItReadsAgainAndLosesNothing) {
  RunnerProcess r("stalled_client_timeout_s = 1\n");
  ASSERT_TRUE(r.start());
  RawClient slow(r.socket());
  // 8 MiB over about 3 s: far more than the 1 MiB in flight plus the socket buffers.
  ASSERT_TRUE(slow.send_frame(run_frame(1, "for i in 1 2 3 4 5 6 7 8; do head -c 1048576 /dev/zero | tr '\\0' y; sleep 0.4; done", false)));
  std::this_thread::sleep_for(5000ms);  // read nothing meanwhile
  std::string job, stalled;
  int64_t last_seq = 0;
  size_t bytes = 0;
  for (std::optional<std::string> f; (f = slow.read_frame(5000ms));) {
    if (json_field(*f, "/type") == "accepted") job = json_field(*f, "/job_id");
    if (json_field(*f, "/type") == "output") {
      bytes += protocol::base64_decode(json_field(*f, "/bytes")).value_or("").size();
      last_seq = std::stoll(json_field(*f, "/seq"));
    }
    if (json_field(*f, "/error/code") == "stalled") {
      stalled = *f;
      break;
    }
  }
  ASSERT_FALSE(stalled.empty()) << "no stalled error; got " << bytes << " bytes";
  EXPECT_NE(json_field(stalled, "/error/message").find(fmt::format("from_seq {}", last_seq + 1)), std::string::npos)
      << stalled << " last seq " << last_seq;
  // Nothing is lost: the rest is in the history.
  RawClient again(r.socket());
  ASSERT_TRUE(again.send_frame(attach_frame(2, job, last_seq + 1)));
  Stream rest = read_stream(again);
  EXPECT_EQ(bytes + rest.stdout_bytes.size(), size_t{8} << 20);
  EXPECT_EQ(json_field(rest.terminal, "/outcome/code"), "0");
  // The CLI reattaches by itself on that error.
  auto cli = r.client({"attach", job});
  EXPECT_EQ(cli.out.size(), size_t{8} << 20);
}

}  // namespace
}  // namespace motor::test
