// Durability (issue 14, items 3-6, 10, 12): nothing is promised before it is on disk, a full
// disk refuses instead of losing, a dead state writer is replaced, one runner per state
// directory and cgroup parent, a finished job holds no fd. Real filesystems (tmpfs mounted by
// the test), real runners, real kill -9.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "base/job_id.hpp"
#include "runner/state_store.hpp"
#include "runner/state_writer.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

std::string run_frame(int id, const std::string& command) {
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":{}}}}})", id, json_quote(command));
}

std::string frame_of(const std::vector<std::string>& frames, const std::string& type) {
  for (const auto& f : frames) {
    if (json_field(f, "/type") == type) return f;
  }
  return "";
}

std::string request(const RunnerProcess& r, const std::string& method, const std::string& params = "{}") {
  RawClient c(r.socket());
  c.send_frame(fmt::format(R"({{"id":1,"method":"{}","params":{}}})", method, params));
  return c.read_frame().value_or("");
}

// A tmpfs of our own, unmounted (lazily) and removed when the test ends.
class TinyFs {
 public:
  TinyFs(const std::string& dir, const std::string& options) : dir_(dir) {
    mkdir(dir_.c_str(), 0711);
    mounted_ = mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0;
  }
  ~TinyFs() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  // Takes every free block (a file of the free size, then whatever a write still finds).
  void fill() {
    const int fd = ::open((dir_ + "/filler").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    std::string chunk(65536, 'x');
    for (size_t size = chunk.size(); size > 0; size /= 2) {
      while (::write(fd, chunk.data(), size) == static_cast<ssize_t>(size)) {
      }
    }
    ::close(fd);
  }
  // Takes every free inode but `leave`.
  void fill_inodes(int leave) {
    mkdir((dir_ + "/inodes").c_str(), 0700);
    int n = 0;
    while (true) {
      const int fd = ::open(fmt::format("{}/inodes/{}", dir_, n).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      if (fd < 0) break;
      ::close(fd);
      ++n;
    }
    for (int i = 1; i <= leave && n - i >= 0; ++i) unlink(fmt::format("{}/inodes/{}", dir_, n - i).c_str());
  }
  void free_all() {
    unlink((dir_ + "/filler").c_str());
    remove_tree(dir_ + "/inodes");
  }
  int64_t free_inodes() const {
    struct statvfs fs {};
    statvfs(dir_.c_str(), &fs);
    return static_cast<int64_t>(fs.f_ffree);
  }

 private:
  std::string dir_;
  bool mounted_ = false;
};

pid_t child_named(pid_t parent, const std::string& comm) {
  DIR* d = opendir("/proc");
  pid_t found = -1;
  while (dirent* e = d ? readdir(d) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
    const auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && stat.substr(open + 1, close - open - 1) == comm && state != 'Z') found = pid;
  }
  if (d) closedir(d);
  return found;
}

size_t open_fds(pid_t pid) {
  size_t n = 0;
  if (DIR* d = opendir(fmt::format("/proc/{}/fd", pid).c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// A loop that stays alive (the writer's pipe does not keep it so) while a test turns it.
struct TestLoop {
  uv_loop_t loop;
  uv_timer_t tick;
  TestLoop() {
    signal(SIGPIPE, SIG_IGN);  // as the runner does: a dead helper's socket answers EPIPE
    uv_loop_init(&loop);
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, [](uv_timer_t*) {}, 5, 5);
  }
  ~TestLoop() {
    uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
  }
  // Turns the loop until `done` or `timeout`.
  template <typename F>
  void run_until(F done, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!done() && std::chrono::steady_clock::now() < until) uv_run(&loop, UV_RUN_ONCE);
  }
};

// One state change with a queued row for each id (the summary padded to `summary`).
std::string change_body(const std::vector<std::string>& ids, const std::string& summary = "true") {
  std::vector<std::string> rows;
  for (const auto& id : ids) {
    runner::PersistedJob j;
    j.job_id = id;
    j.caller = "root";
    j.workspace_key = "default";
    j.summary = summary;
    j.state = runner::JobState::kQueued;
    rows.push_back(runner::encode_job(j));
  }
  return runner::encode_change(false, rows, {});
}
std::string change_of(const std::vector<std::string>& ids) { return runner::join_changes({change_body(ids)}); }

class RunnerDurability : public ::testing::Test {
 protected:
  void SetUp() override { MOTOR_REQUIRE(geteuid() == 0, "integration tests start real runners and mount tmpfs; need root"); }
  // A started runner whose state directory (and so its workspaces and job logs) is a tmpfs of
  // its own, with no disk_free_floor; null (and a failure) if either could not be had.
  RunnerProcess* runner_on_tiny_fs(const std::string& fs_options, const std::string& extra_config = "") {
    runner_ = std::make_unique<RunnerProcess>("disk_free_floor = 0\n" + extra_config);
    fs_ = std::make_unique<TinyFs>(runner_->state_dir(), fs_options);
    if (!fs_->mounted()) return ADD_FAILURE() << "cannot mount a tmpfs", nullptr;
    if (!runner_->start()) return ADD_FAILURE() << runner_->log(), nullptr;
    return runner_.get();
  }
  void TearDown() override {
    fs_.reset();  // lazily unmounted first, so the runner's directory can then be removed
    runner_.reset();
  }
  std::unique_ptr<RunnerProcess> runner_;
  std::unique_ptr<TinyFs> fs_;
};

// ---- item 3: the state writer on a full disk ----

TEST_F(RunnerDurability, TheStateWriterReportsAFailedSaveAndRetriesItOnATimer) {
  const std::string dir = make_temp_dir();
  {
    TinyFs fs(dir + "/fs", "size=256k,mode=0700");
    ASSERT_TRUE(fs.mounted());
    ASSERT_TRUE(runner::apply_changes_now(dir + "/fs", change_of({"01890a5e-0000-7000-8000-000000000000"})));
    TestLoop t;
    runner::StateWriter writer;
    ASSERT_TRUE(writer.start(&t.loop, dir + "/fs"));
    fs.fill();
    bool durable = false, failed = false, retried = false;
    std::string why;
    std::vector<runner::StateWriter::Waiter> waiters;
    waiters.push_back({[&] { durable = true; }, [&](const Error& e) { failed = true, why = e.message; }});
    waiters.push_back({[&] { retried = true; }, nullptr});  // waits for a save that succeeds
    // Rows larger than the WAL's free pages: the commit must grow it, on a full disk.
    std::vector<std::string> ids;
    for (int i = 1; i <= 40; ++i) ids.push_back(fmt::format("01890a5e-0000-7000-8000-{:012}", i));
    writer.write(change_body(ids, std::string(4000, 'j')), std::move(waiters));
    t.run_until([&] { return durable || failed; }, 5000ms);
    EXPECT_TRUE(failed) << "a failed save was reported as durable";
    EXPECT_FALSE(durable);
    EXPECT_FALSE(retried);
    // The write's errno (ENOSPC) or SQLite's own SQLITE_FULL, depending on which page the disk ran
    // out at: either names the full disk.
    EXPECT_TRUE(why.find("No space left on device") != std::string::npos || why.find("disk is full") != std::string::npos)
        << why;
    EXPECT_TRUE(writer.failing());
    fs.free_all();
    t.run_until([&] { return retried; }, 5000ms);
    EXPECT_TRUE(retried) << "the save was not retried once there was room";
    EXPECT_FALSE(writer.failing());
    writer.stop();
    // Nothing lost: the row saved before the disk filled, and every row of the retried save.
    auto st = runner::load_state(dir + "/fs");
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_EQ(st->jobs.size(), 41u);
  }
  remove_tree(dir);
}

// ---- item 6: the state writer's helper dies ----

TEST_F(RunnerDurability, AStateWriterWhoseHelperDiesStartsItAgainAndSavesWhatItHadInHand) {
  const std::string dir = make_temp_dir();
  {
    TestLoop t;
    runner::StateWriter writer;
    ASSERT_TRUE(writer.start(&t.loop, dir));
    const pid_t first = writer.pid();
    ASSERT_GT(first, 0);
    std::this_thread::sleep_for(1100ms);  // past the window in which a second death means "give up"
    kill(first, SIGKILL);
    std::this_thread::sleep_for(50ms);
    int done = 0;
    for (int n = 1; n <= 3; ++n) {
      std::vector<runner::StateWriter::Waiter> w;
      w.push_back({[&] { ++done; }, nullptr});
      writer.write(change_body({fmt::format("01890a5e-0000-7000-8000-{:012}", n)}), std::move(w));
      t.run_until([&] { return done >= n; }, 5000ms);
    }
    EXPECT_EQ(done, 3);
    auto st = runner::load_state(dir);
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_EQ(st->jobs.size(), 3u);
    EXPECT_GT(writer.pid(), 0);
    EXPECT_NE(writer.pid(), first);
    writer.stop();
  }
  remove_tree(dir);
}

TEST_F(RunnerDurability, KillingTheStateHelperWhileJobsRunNeverCrashesTheRunner) {
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  std::this_thread::sleep_for(1100ms);
  const pid_t helper = child_named(runner.pid(), "motor-state");
  ASSERT_GT(helper, 0) << "no motor-state helper under the runner";
  RawClient running(runner.socket());
  ASSERT_TRUE(running.send_frame(run_frame(1, "sleep 1; echo done")));
  ASSERT_TRUE(running.read_frame());  // accepted
  kill(helper, SIGKILL);
  std::string last_job;
  for (int i = 0; i < 5; ++i) {
    auto r = runner.client({"run", "--json", "--", "/bin/true"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err << runner.log();
    last_job = json_field(r.out.substr(0, r.out.find('\n')), "/job_id");
  }
  EXPECT_EQ(json_field(frame_of(read_until_terminal(running), "terminal"), "/outcome/code"), "0");
  EXPECT_EQ(kill(runner.pid(), 0), 0) << "the runner died: " << runner.log();
  const pid_t again = child_named(runner.pid(), "motor-state");
  EXPECT_GT(again, 0);
  EXPECT_NE(again, helper);
  // Still saved: the last job is on record (a restart knows it).
  runner.kill9();
  ASSERT_TRUE(runner.start());
  EXPECT_EQ(json_field(runner.client({"status", last_job, "--json"}).out, "/result/state"), "finished");
}

// ---- item 3: a job is accepted only once it is on record ----

TEST_F(RunnerDurability, AFullStateDiskRefusesNewJobsInsteadOfAcceptingAndLosingThem) {
  // disk_free_floor = 0: the operator's floor is not what saves us.
  ASSERT_TRUE(runner_on_tiny_fs("size=8m,mode=0711"));
  RunnerProcess& runner = *runner_;
  ASSERT_EQ(runner.client({"run", "--", "/bin/true"}).exit_code, 0);
  fs_->fill();
  std::vector<std::string> accepted;
  for (int i = 0; i < 3; ++i) {
    RawClient c(runner.socket());
    ASSERT_TRUE(c.send_frame(run_frame(1, "true")));
    auto frames = read_until_terminal(c);
    if (auto a = frame_of(frames, "accepted"); !a.empty()) accepted.push_back(json_field(a, "/job_id"));
    const std::string t = frame_of(frames, "terminal");
    EXPECT_EQ(json_field(t, "/outcome/reason"), "runner_disk_full") << t;
    EXPECT_NE(json_field(t, "/retry_after_ms"), "null") << t;
    // Refused up front by the floor of what recording a job needs, before any write failed.
    EXPECT_NE(json_field(t, "/refusal_detail").find("state directory's filesystem"), std::string::npos) << t;
  }
  EXPECT_TRUE(accepted.empty()) << "accepted on a full disk: " << accepted.size();
  fs_->free_all();
  runner.kill9();
  ASSERT_TRUE(runner.start());
  for (const auto& id : accepted) {
    EXPECT_EQ(runner.client({"status", id, "--json"}).exit_code, 0) << "accepted job " << id << " is unknown";
  }
  EXPECT_EQ(runner.client({"run", "--", "/bin/true"}).exit_code, 0);  // room again
  runner.stop();
}

TEST_F(RunnerDurability, ASaveThatFailsRefusesTheJobItWouldHaveRecordedAndTheRefusalSurvivesARestart) {
  // The disk fills while the job's save is in the state writer's hands (a slow disk: the
  // writer waits 1.5 s before each transaction): the room check passed, the commit itself fails
  // with ENOSPC (its WAL frames need new blocks) and rolls back.
  runner_ = std::make_unique<RunnerProcess>("disk_free_floor = 0\n");
  runner_->use_binary(MOTOR_RUNNER_TESTING_BIN, {"--test-slow-state-save=1500"});
  fs_ = std::make_unique<TinyFs>(runner_->state_dir(), "size=16m,mode=0711");
  ASSERT_TRUE(fs_->mounted());
  ASSERT_TRUE(runner_->start()) << runner_->log();
  RunnerProcess& runner = *runner_;
  auto first = runner.client({"run", "--json", "--", "/bin/true"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const std::string kept = json_field(first.out.substr(0, first.out.find('\n')), "/job_id");
  RawClient c(runner.socket());
  // Its sandbox is built while the save is in hand; the command itself waits for the record.
  ASSERT_TRUE(c.send_frame(run_frame(1, "touch /workspace/ran")));
  std::this_thread::sleep_for(500ms);  // the save is in the writer's hands
  fs_->fill();
  auto frames = read_until_terminal(c);
  EXPECT_EQ(frame_of(frames, "accepted"), "") << "accepted although its record could not be saved";
  EXPECT_EQ(frame_of(frames, "started"), "");
  const std::string t = frame_of(frames, "terminal");
  EXPECT_EQ(json_field(t, "/outcome/reason"), "runner_disk_full") << t << runner.log();
  EXPECT_EQ(json_field(t, "/ran"), "none") << t;
  EXPECT_EQ(json_field(t, "/retry_after_ms"), "60000") << t;
  EXPECT_NE(access((runner.workspace("default") + "/ran").c_str(), F_OK), 0) << "the command ran unrecorded";
  const std::string job = json_field(t, "/job_id");
  // While saves fail, new jobs are refused at once.
  auto refused = runner.client({"run", "--json", "-c", "true"});
  EXPECT_EQ(refused.exit_code, 75) << refused.out;
  fs_->free_all();
  std::this_thread::sleep_for(4000ms);  // the retry timer saves the refusal (1 s + the slow disk)
  runner.kill9();
  ASSERT_TRUE(runner.start());
  auto status = runner.client({"status", job, "--json"});
  EXPECT_EQ(json_field(status.out, "/result/terminal/outcome/reason"), "runner_disk_full") << status.out;
  // Nothing lost: the job recorded before the disk filled is still known.
  EXPECT_EQ(json_field(runner.client({"status", kept, "--json"}).out, "/result/state"), "finished");
  EXPECT_EQ(runner.client({"run", "--", "/bin/true"}).exit_code, 0);
  runner.stop();
}

// A Linux job's sandbox is built while its record is saved; its command runs only once the record
// is durable (motor-init's gate), and `accepted` comes before its first record.
TEST_F(RunnerDurability, AJobsCommandWaitsForItsRecordWhileItsSandboxIsBuilt) {
  RunnerProcess runner;
  runner.use_binary(MOTOR_RUNNER_TESTING_BIN, {"--test-slow-state-save=1500"});
  ASSERT_TRUE(runner.start()) << runner.log();
  const std::string ran = runner.workspace("default") + "/ran";
  RawClient c(runner.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "touch /workspace/ran")));
  std::this_thread::sleep_for(1000ms);  // the sandbox is long built; the save still in hand
  EXPECT_NE(access(ran.c_str(), F_OK), 0) << "the command ran before its record was durable";
  auto frames = read_until_terminal(c);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(json_field(frames.front(), "/type"), "accepted") << frames.front();
  EXPECT_EQ(json_field(frame_of(frames, "terminal"), "/outcome/code"), "0") << runner.log();
  EXPECT_EQ(access(ran.c_str(), F_OK), 0);
  runner.stop();
}

// ---- item 4: the drain flag, and a job that ran before its running state was saved ----

TEST_F(RunnerDurability, TheDrainReplyComesOnlyOnceTheFlagIsSaved) {
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  for (int round = 0; round < 8; ++round) {
    const bool drain = round % 2 == 0;
    const std::string reply = request(runner, drain ? "runner.drain" : "runner.resume");
    ASSERT_NE(reply.find("\"result\""), std::string::npos) << reply;
    runner.kill9();  // at once: what the reply promised must be on disk already
    ASSERT_TRUE(runner.start());
    EXPECT_EQ(json_field(request(runner, "runner.status"), "/result/draining"), drain ? "true" : "false")
        << "round " << round;
  }
}

TEST_F(RunnerDurability, AQueuedRecordWhoseCgroupExistsIsReportedAsRanWithAnUnknownOutcome) {
  // What a kill -9 between the job's spawn and the save of its running state leaves: state.json
  // says "queued", the job's cgroup exists with its process in it, its log has no record yet.
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  runner.kill9();
  auto id = motor::new_job_id();
  ASSERT_TRUE(id);
  write_file(runner.state_dir() + "/state.json",
             fmt::format(R"({{"version":1,"draining":false,"jobs":[{{"job_id":"{}","caller":"root","workspace_key":"default",)"
                         R"("summary":"sleep","state":"queued","cgroup":"","created_at_ms":1,"started_at_ms":0,"terminal":null}}]}})",
                         *id));
  mkdir((runner.state_dir() + "/jobs/" + *id).c_str(), 0700);
  write_file(runner.state_dir() + "/jobs/" + *id + "/log.0", "");
  const std::string marker = unique_marker();
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) != 1) _exit(1);  // in the cgroup first, so the sleep is in it too
    execl("/bin/sh", "sh", "-c", ("sleep 600; : " + marker).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(go[0]);
  std::vector<std::string> dirs;
  for (const char* h : {"pids", "unified"}) {
    const std::string dir = fmt::format("/sys/fs/cgroup/{}/{}/job-{}", h, runner.cgroup_parent(), *id);
    mkdir(fmt::format("/sys/fs/cgroup/{}/{}", h, runner.cgroup_parent()).c_str(), 0755);
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
    write_file(dir + "/cgroup.procs", std::to_string(sleeper));
    dirs.push_back(dir);
  }
  ASSERT_EQ(write(go[1], "g", 1), 1);
  close(go[1]);
  for (int i = 0; i < 200 && processes_with(marker).size() < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(runner.start()) << runner.log();
  int status = 0;
  EXPECT_EQ(waitpid(sleeper, &status, 0), sleeper);
  EXPECT_TRUE(processes_with(marker).empty());  // the restart killed what the job left
  auto st = runner.client({"status", *id, "--json"});
  EXPECT_EQ(json_field(st.out, "/result/terminal/outcome/type"), "outcome_unknown") << st.out;
  EXPECT_EQ(json_field(st.out, "/result/terminal/ran"), "remote") << st.out;
  for (const auto& d : dirs) EXPECT_NE(access(d.c_str(), F_OK), 0) << d << " was left";
}

// ---- item 5: the terminal record on a full disk ----

TEST_F(RunnerDurability, OnAFullDiskTheTerminalRecordStillReachesFollowersAndLandsInTheLogLater) {
  // The job waits in the queue (its log exists, empty) while the disk fills, then starts and
  // ends: no record of it can be logged, the terminal one least of all.
  ASSERT_TRUE(runner_on_tiny_fs("size=16m,mode=0711", "max_running_jobs = 1\n"));
  RunnerProcess& runner = *runner_;
  RawClient first(runner.socket()), c(runner.socket());
  ASSERT_TRUE(first.send_frame(run_frame(1, "sleep 1")));
  ASSERT_TRUE(first.read_frame());
  ASSERT_TRUE(c.send_frame(run_frame(1, "sleep 0.5")));
  auto accepted = c.read_frame();
  ASSERT_TRUE(accepted);
  const std::string job = json_field(*accepted, "/job_id");
  fs_->fill();
  const std::string terminal = frame_of(read_until_terminal(c, 10000ms), "terminal");
  ASSERT_FALSE(terminal.empty()) << "the follower never got the terminal record\n" << runner.log();
  EXPECT_EQ(json_field(terminal, "/outcome/code"), "0") << terminal;
  // A new follower gets it too, also before the log has room.
  RawClient late(runner.socket());
  ASSERT_TRUE(late.send_frame(fmt::format(R"({{"id":2,"method":"exec.attach","params":{{"job_id":"{}","from_seq":1}}}})", job)));
  const std::string again = frame_of(read_until_terminal(late, 5000ms), "terminal");
  EXPECT_EQ(json_field(again, "/seq"), json_field(terminal, "/seq")) << again;
  EXPECT_EQ(json_field(again, "/outcome"), json_field(terminal, "/outcome")) << again;
  fs_->free_all();
  std::this_thread::sleep_for(1500ms);  // the log (and state.json) take it on the retry
  runner.kill9();
  ASSERT_TRUE(runner.start());
  RawClient after(runner.socket());
  ASSERT_TRUE(after.send_frame(fmt::format(R"({{"id":3,"method":"exec.attach","params":{{"job_id":"{}","from_seq":1}}}})", job)));
  EXPECT_EQ(json_field(frame_of(read_until_terminal(after, 5000ms), "terminal"), "/outcome/code"), "0");
  runner.stop();
}

TEST_F(RunnerDurability, SigtermOnAFullDiskStillEndsTheJobsAndTheRunner) {
  ASSERT_TRUE(runner_on_tiny_fs("size=16m,mode=0711"));
  RunnerProcess& runner = *runner_;
  RawClient c(runner.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo begun; sleep 1; head -c 200000 /dev/zero | tr '\\0' y; sleep 600")));
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) {
  }
  fs_->fill();
  std::this_thread::sleep_for(1500ms);  // its output cannot be logged: reading is paused
  EXPECT_EQ(runner.stop(std::chrono::seconds(15)), 0) << "the runner did not stop\n" << runner.log();
  const std::string terminal = frame_of(read_until_terminal(c, 2000ms), "terminal");
  EXPECT_EQ(json_field(terminal, "/outcome/signal"), "9") << terminal;  // it ran: the kill's signal
  EXPECT_EQ(json_field(terminal, "/killed"), "shutdown") << terminal;
}

// ---- item 10: one runner per state directory and per cgroup parent ----

// Starts a second runner with these arguments; returns its exit status (killing it after 10 s).
int second_runner(const std::vector<std::string>& args, std::string& err) {
  const std::string out = make_temp_dir();
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open((out + "/err").c_str(), O_WRONLY | O_CREAT, 0600);
    dup2(fd, 2);
    std::vector<std::string> a{MOTOR_RUNNER_BIN, "serve"};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(MOTOR_RUNNER_BIN, argv.data());
    _exit(127);
  }
  int status = 0;
  for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGTERM);
    std::this_thread::sleep_for(2s);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    status = -1;
  }
  err = read_file(out + "/err");
  remove_tree(out);
  return status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(RunnerDurability, ASecondRunnerOnTheSameStateDirectoryExitsAndLeavesTheFirstOnesJobsAlone) {
  RunnerProcess first;
  ASSERT_TRUE(first.start());
  const std::string marker = unique_marker();
  RawClient c(first.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo begun; sleep 30; : " + marker)));
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) {
  }
  RunnerProcess other;  // its config (another cgroup parent) and socket, the first one's state
  std::string err;
  const int rc = second_runner({"--config", other.config_path(), "--state-dir", first.state_dir(), "--socket",
                                other.dir() + "/other.sock"}, err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "the second runner started and served";
  EXPECT_NE(err.find("another runner"), std::string::npos) << err;
  EXPECT_FALSE(processes_with(marker).empty()) << "the second runner killed the first one's job";
  ASSERT_TRUE(c.send_frame(fmt::format(R"({{"id":2,"method":"exec.cancel","params":{{"job_id":"{}"}}}})",
                                       json_field(request(first, "exec.list"), "/result/jobs/0/job_id"))));
  EXPECT_EQ(json_field(frame_of(read_until_terminal(c), "terminal"), "/killed"), "cancel");
}

TEST_F(RunnerDurability, ASecondRunnerWithTheSameCgroupParentExitsAndLeavesTheFirstOnesJobsAlone) {
  RunnerProcess first;
  ASSERT_TRUE(first.start());
  const std::string marker = unique_marker();
  RawClient c(first.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo begun; sleep 30; : " + marker)));
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) {
  }
  RunnerProcess other;
  write_file(other.config_path(), fmt::format("cgroup_parent = {}\n", first.cgroup_parent()));
  std::string err;
  const int rc = second_runner({"--config", other.config_path(), "--state-dir", other.state_dir(), "--socket",
                                other.socket()}, err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "the second runner started and served";
  EXPECT_NE(err.find("cgroup parent"), std::string::npos) << err;
  EXPECT_FALSE(processes_with(marker).empty()) << "the second runner killed the first one's job";
  EXPECT_EQ(kill(first.pid(), 0), 0);
}

TEST_F(RunnerDurability, AJobWhoseCgroupVanishedEndsWithItsRecordInsteadOfPollingForever) {
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  const std::string marker = unique_marker();
  RawClient c(runner.socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "echo begun; sleep 600; : " + marker)));
  std::string job;
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) {
    if (json_field(*f, "/type") == "accepted") job = json_field(*f, "/job_id");
  }
  // What another runner's recovery did to it: its processes killed, its cgroup removed, all
  // while this runner was not looking.
  kill(runner.pid(), SIGSTOP);
  std::vector<std::string> dirs;
  for (const char* h : {"memory", "pids", "cpuset", "freezer", "cpu", "unified"}) {
    const std::string d = fmt::format("/sys/fs/cgroup/{}/{}/job-{}", h, runner.cgroup_parent(), job);
    if (access(d.c_str(), F_OK) == 0) dirs.push_back(d);
  }
  ASSERT_FALSE(dirs.empty());
  for (int i = 0; i < 500; ++i) {
    std::istringstream procs(read_file(dirs.front() + "/cgroup.procs"));
    for (pid_t p; procs >> p;) kill(p, SIGKILL);
    bool all = true;
    for (const auto& d : dirs) all = (rmdir(d.c_str()) == 0 || errno == ENOENT) && all;
    if (all) break;
    std::this_thread::sleep_for(10ms);
  }
  kill(runner.pid(), SIGCONT);
  const std::string terminal = frame_of(read_until_terminal(c, 10000ms), "terminal");
  EXPECT_EQ(json_field(terminal, "/outcome/type"), "signal") << terminal << runner.log();
  const std::string log = runner.log();
  size_t complaints = 0;
  for (size_t at = 0; (at = log.find("cannot read the cgroup", at)) != std::string::npos; ++at) ++complaints;
  EXPECT_LE(complaints, 2u);
  EXPECT_EQ(runner.stop(std::chrono::seconds(10)), 0);
}

// ---- item 12: no fd per finished job, no leftover temp files ----

TEST_F(RunnerDurability, FinishedJobsHoldNoFdSoJobsGoOnAtALowFdLimit) {
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  ASSERT_EQ(runner.client({"run", "--", "/bin/true"}).exit_code, 0);
  const size_t before = open_fds(runner.pid());
  rlimit limit{};
  ASSERT_EQ(prlimit(runner.pid(), RLIMIT_NOFILE, nullptr, &limit), 0);
  limit.rlim_cur = before + 40;
  ASSERT_EQ(prlimit(runner.pid(), RLIMIT_NOFILE, &limit, nullptr), 0);
  for (int i = 0; i < 80; ++i) {
    auto r = runner.client({"run", "--", "/bin/true"});
    ASSERT_EQ(r.exit_code, 0) << "job " << i << ": " << r.out << r.err;
  }
  EXPECT_LE(open_fds(runner.pid()), before + 4);
  // A finished job's history is still there for a replay.
  auto list = runner.client({"list", "--json"});
  const std::string id = json_field(list.out, "/result/jobs/0/job_id");
  EXPECT_EQ(runner.client({"attach", id}).exit_code, 0);
}

TEST_F(RunnerDurability, LeftoverTempFilesOfInterruptedSavesAreRemovedAtStart) {
  RunnerProcess runner;
  ASSERT_TRUE(runner.start());
  runner.kill9();
  write_file(runner.state_dir() + "/.state.json.AbC123", "half a save");
  write_file(runner.state_dir() + "/.state.json.zz", "not ours");  // not a temp name: kept
  ASSERT_TRUE(runner.start());
  EXPECT_NE(access((runner.state_dir() + "/.state.json.AbC123").c_str(), F_OK), 0);
  EXPECT_EQ(access((runner.state_dir() + "/.state.json.zz").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace motor::test
