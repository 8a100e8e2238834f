// Admission: CPU claims, memory reservation, the disk floor, FIFO queueing with its wait limit,
// runner_full, drain and resume (also across a restart), runner.status and the metrics.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

std::string run_frame(int id, const std::string& command, const std::string& extra = "") {
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"{}"{}}}}})", id, command, extra);
}

std::string field_of(const std::vector<std::string>& frames, const std::string& type, const std::string& path) {
  for (const auto& f : frames) {
    if (json_field(f, "/type") == type) return json_field(f, path);
  }
  return "<none>";
}

class RunnerAdmission : public ::testing::Test {
 protected:
  void SetUp() override { MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root"); }
  void start(const std::string& config) {
    runner_ = std::make_unique<RunnerProcess>(config);
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override { runner_.reset(); }
  std::unique_ptr<RunnerProcess> runner_;
};

TEST_F(RunnerAdmission, ClaimsNeverDoubleBookACoreWithoutOversubscription) {
  start("");
  const std::string status = runner_status(*runner_);
  const int cores = std::stoi(json_field(status, "/result/cores"));
  // One job per core, each holding its core; one more must wait in the queue.
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i <= cores; ++i) {
    clients.push_back(std::make_unique<RawClient>(runner_->socket()));
    ASSERT_TRUE(clients.back()->send_frame(run_frame(1, "grep Cpus_allowed_list /proc/self/status; sleep 1")));
  }
  std::vector<std::vector<std::string>> streams;
  for (auto& c : clients) streams.push_back(read_until_terminal(*c));
  std::multiset<std::string> concurrent_cpus;
  int queued = 0;
  for (auto& s : streams) {
    if (field_of(s, "accepted", "/queue_position") != "0") ++queued;
    EXPECT_EQ(field_of(s, "terminal", "/outcome/code"), "0");
  }
  // The last one waited for a core to come free (about a second).
  EXPECT_GE(std::stoi(field_of(streams.back(), "started", "/queue_wait_ms")), 500) << streams.back()[1];
  EXPECT_GE(queued, 1);
  // While they ran, the first `cores` jobs each had a different core.
  std::set<std::string> seen;
  for (int i = 0; i < cores; ++i) {
    std::string out;
    for (const auto& f : streams[static_cast<size_t>(i)]) {
      if (json_field(f, "/type") == "output") out += f;
    }
    seen.insert(out.substr(out.find("\"bytes\"")));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(cores));
}

TEST_F(RunnerAdmission, MemoryReservationMakesAJobWaitUntilItFits) {
  // The host's memory less a reserve that leaves room for one 1 GiB job at a time.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  meminfo >> key >> kib;
  const int64_t reserve = kib * 1024 - (int64_t{3} << 29);  // 1.5 GiB left for jobs
  start(fmt::format("memory_reserve = {}\ncpu_oversubscription = 8\n", reserve));
  RawClient a(runner_->socket()), b(runner_->socket());
  ASSERT_TRUE(a.send_frame(run_frame(1, "sleep 1", R"(,"memory":"1G")")));
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(b.send_frame(run_frame(1, "true", R"(,"memory":"1G")")));
  auto sa = read_until_terminal(a), sb = read_until_terminal(b);
  EXPECT_EQ(field_of(sb, "accepted", "/queue_position"), "0");
  EXPECT_GE(std::stoi(field_of(sb, "started", "/queue_wait_ms")), 500);  // waited for a's reservation
  // A job that can never fit is refused at once, not queued for ever.
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(run_frame(1, "true", R"(,"memory":"2G")")));
  EXPECT_EQ(json_field(c.read_frame().value_or(""), "/error/code"), "bad_request");
}

TEST_F(RunnerAdmission, QueueIsFifoAndHonoursItsWaitLimit) {
  start("max_running_jobs = 1\ncpu_oversubscription = 8\n");
  RawClient first(runner_->socket());
  ASSERT_TRUE(first.send_frame(run_frame(1, "sleep 1.5")));
  std::this_thread::sleep_for(300ms);
  std::vector<std::unique_ptr<RawClient>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(std::make_unique<RawClient>(runner_->socket()));
    ASSERT_TRUE(waiting.back()->send_frame(run_frame(1, fmt::format("echo {}", i))));
    std::this_thread::sleep_for(50ms);
  }
  RawClient impatient(runner_->socket());
  ASSERT_TRUE(impatient.send_frame(run_frame(1, "echo never", R"(,"queue_wait_limit_s":0)")));
  auto refused = read_until_terminal(impatient);
  EXPECT_EQ(field_of(refused, "terminal", "/outcome/reason"), "queue_wait_exceeded");
  EXPECT_EQ(field_of(refused, "terminal", "/ran"), "none");
  std::vector<int64_t> started_at;
  for (int i = 0; i < 3; ++i) {
    auto s = read_until_terminal(*waiting[static_cast<size_t>(i)]);
    EXPECT_EQ(field_of(s, "accepted", "/queue_position"), std::to_string(i));
    started_at.push_back(std::stoll(field_of(s, "started", "/started_at_ms")));
  }
  EXPECT_LE(started_at[0], started_at[1]);
  EXPECT_LE(started_at[1], started_at[2]);
  read_until_terminal(first);
}

TEST_F(RunnerAdmission, AFullQueueRefusesWithRunnerFull) {
  start("max_running_jobs = 1\nmax_queued_jobs = 1\ncpu_oversubscription = 8\n");
  RawClient a(runner_->socket()), b(runner_->socket()), c(runner_->socket());
  ASSERT_TRUE(a.send_frame(run_frame(1, "sleep 1")));
  for (std::optional<std::string> f; (f = a.read_frame()) && json_field(*f, "/type") != "started";) {
  }
  ASSERT_TRUE(b.send_frame(run_frame(1, "true")));  // waits: the one job slot is taken
  auto accepted = b.read_frame();
  ASSERT_TRUE(accepted);
  EXPECT_EQ(json_field(*accepted, "/queue_position"), "0");
  ASSERT_TRUE(c.send_frame(run_frame(1, "true")));  // the queue (of one) is full
  auto sc = read_until_terminal(c);
  EXPECT_EQ(field_of(sc, "terminal", "/outcome/reason"), "runner_full");
  EXPECT_NE(field_of(sc, "terminal", "/retry_after_ms"), "null");
  EXPECT_EQ(runner_->client({"run", "-c", "true"}).exit_code, 75);  // transient, for the CLI
  read_until_terminal(a);
  read_until_terminal(b);
}

TEST_F(RunnerAdmission, TheDiskFloorRefusesNewWorkAndLeavesRunningJobsAlone) {
  // A small filesystem of our own as the workspace root, and a floor above what is left on it.
  const std::string fs = make_temp_dir();
  ASSERT_EQ(mount("tmpfs", fs.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=0711"), 0);
  start(fmt::format("workspace_root = {}\ndisk_free_floor = 32M\n", fs));
  RawClient running(runner_->socket());
  ASSERT_TRUE(running.send_frame(run_frame(1, "sleep 1; echo survived")));
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(run_program({"/usr/bin/fallocate", "-l", "40M", fs + "/filler"}).exit_code, 0);
  auto refused = runner_->client({"run", "--json", "-c", "true"});
  EXPECT_EQ(refused.exit_code, 75);
  EXPECT_NE(refused.out.find("\"runner_disk_full\""), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("\"retry_after_ms\":60000"), std::string::npos);
  auto s = read_until_terminal(running);
  EXPECT_EQ(field_of(s, "terminal", "/outcome/code"), "0");
  unlink((fs + "/filler").c_str());
  EXPECT_EQ(runner_->client({"run", "-c", "true"}).exit_code, 0);  // room again
  runner_.reset();
  umount2(fs.c_str(), MNT_DETACH);
  rmdir(fs.c_str());
}

TEST_F(RunnerAdmission, DrainLetsQueuedAndRunningJobsFinishThenResumeReopens) {
  start("max_running_jobs = 1\ncpu_oversubscription = 8\n");
  RawClient a(runner_->socket()), b(runner_->socket());
  ASSERT_TRUE(a.send_frame(run_frame(1, "sleep 1; echo a")));
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(b.send_frame(run_frame(1, "echo b")));  // queued behind a
  std::this_thread::sleep_for(200ms);
  auto drain_wait = std::async(std::launch::async, [&] { return runner_->client({"drain", "--wait"}); });
  std::this_thread::sleep_for(200ms);
  auto refused = runner_->client({"run", "--json", "-c", "true"});
  EXPECT_NE(refused.out.find("\"runner_draining\""), std::string::npos);
  EXPECT_EQ(refused.exit_code, 75);
  EXPECT_EQ(field_of(read_until_terminal(a), "terminal", "/outcome/code"), "0");
  EXPECT_EQ(field_of(read_until_terminal(b), "terminal", "/outcome/code"), "0");
  auto waited = drain_wait.get();
  EXPECT_EQ(waited.exit_code, 0);
  EXPECT_NE(waited.out.find("running_jobs: 0"), std::string::npos) << waited.out;
  // Drain survives a restart.
  ASSERT_EQ(runner_->stop(), 0);
  ASSERT_TRUE(runner_->start());
  EXPECT_EQ(json_field(runner_status(*runner_), "/result/draining"), "true");
  EXPECT_EQ(runner_->client({"run", "-c", "true"}).exit_code, 75);
  EXPECT_EQ(runner_->client({"resume"}).exit_code, 0);
  EXPECT_EQ(runner_->client({"run", "-c", "true"}).exit_code, 0);
}

TEST_F(RunnerAdmission, StatusNamesItsFields) {
  start("");
  RawClient a(runner_->socket());
  ASSERT_TRUE(a.send_frame(run_frame(1, "sleep 1")));
  std::this_thread::sleep_for(400ms);
  const std::string s = runner_status(*runner_);
  for (const char* path : {"/result/version", "/result/uptime_s", "/result/queue_depth", "/result/draining",
                           "/result/cpus_total", "/result/cpus_claimed", "/result/memory_budget_bytes",
                           "/result/memory_claimed_bytes", "/result/memory_free_bytes", "/result/disk_free_bytes",
                           "/result/running_jobs/0/job_id", "/result/running_jobs/0/cpus",
                           "/result/running_jobs/0/workspace_key", "/result/running_jobs/0/weight"}) {
    EXPECT_NE(json_field(s, path)[0], '<') << path << " in " << s;
  }
  EXPECT_EQ(json_field(s, "/result/memory_claimed_bytes"), std::to_string(int64_t{2} << 30));
  read_until_terminal(a);
}

// A strict reader of Prometheus text: every sample line is `name{labels} value`.
bool valid_prometheus_text(const std::string& text, std::string& why) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    const auto space = line.rfind(' ');
    if (space == std::string::npos) return why = line, false;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    if (name.empty() || name.rfind("motor_", 0) != 0) return why = line, false;
    try {
      (void)std::stod(line.substr(space + 1));
    } catch (...) {
      if (line.substr(space + 1) != "+Inf" && line.substr(space + 1) != "NaN") return why = line, false;
    }
  }
  return true;
}

double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

TEST_F(RunnerAdmission, MetricsFileParsesAndItsCountersMove) {
  const std::string dir = make_temp_dir();
  start(fmt::format("metrics_file = {}/motor.prom\n", dir));
  auto before = runner_->client({"status", "--metrics"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  std::string why;
  EXPECT_TRUE(valid_prometheus_text(before.out, why)) << why;
  const std::string exit_series = R"(motor_jobs_finished_total{outcome="exit"})";
  const double finished_before = sample(before.out, exit_series);
  ASSERT_GE(finished_before, 0) << before.out;
  EXPECT_EQ(runner_->client({"run", "-c", "true"}).exit_code, 0);
  EXPECT_EQ(runner_->client({"run", "-w", "../bad", "-c", "true"}).exit_code, 69);
  auto after = runner_->client({"status", "--metrics"});
  EXPECT_EQ(sample(after.out, exit_series), finished_before + 1);
  EXPECT_EQ(sample(after.out, R"(motor_refusals_total{reason="workspace_key_rejected"})"), 1);
  // The textfile is written (atomically) too.
  const std::string file = read_file(dir + "/motor.prom");
  EXPECT_TRUE(valid_prometheus_text(file, why)) << why;
  EXPECT_NE(file.find("motor_jobs_running"), std::string::npos);
  runner_.reset();
  remove_tree(dir);
}

}  // namespace
}  // namespace motor::test
