// SIGHUP reloads the config (issue 19): the keys that may change while running take their new
// value, the others are named in the log and keep theirs, a broken file changes nothing, and the
// running job and the runner carry on. Config errors found at start exit 78.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

bool wait_for_log(const RunnerProcess& runner, const std::string& text, std::size_t after) {
  for (int i = 0; i < 200; ++i) {
    const std::string log = runner.log();
    if (log.size() > after && log.find(text, after) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

std::string run_with_timeout(int id, int64_t timeout_s) {
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"true","timeout_s":{}}}}})", id, timeout_s);
}

class RunnerReload : public ::testing::Test {
 protected:
  void SetUp() override { MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root"); }
};

TEST_F(RunnerReload, SighupTakesLiveKeysNamesTheOthersAndSurvivesABrokenFile) {
  RunnerProcess runner("max_timeout_s = 3600\n");
  ASSERT_TRUE(runner.start()) << runner.log();
  const std::string original = read_file(runner.config_path());

  RawClient before(runner.socket());
  ASSERT_TRUE(before.send_frame(run_with_timeout(1, 600)));
  auto accepted = before.read_frame();
  ASSERT_TRUE(accepted) << runner.log();
  EXPECT_EQ(json_field(*accepted, "/type"), "accepted") << *accepted;

  // max_timeout_s may change while running; max_sessions may not.
  std::size_t mark = runner.log().size();
  std::string edited = original;
  edited.replace(edited.find("max_timeout_s = 3600"), 20, "max_timeout_s = 60");
  write_file(runner.config_path(), edited + "default_timeout_s = 30\nmax_sessions = 7\n");
  ASSERT_EQ(kill(runner.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_log(runner, "now in effect: default_timeout_s, max_timeout_s", mark)) << runner.log();
  EXPECT_TRUE(wait_for_log(runner, "kept until a restart (they cannot change while running): max_sessions", mark))
      << runner.log();

  RawClient after(runner.socket());
  ASSERT_TRUE(after.send_frame(run_with_timeout(2, 600)));
  auto refused = after.read_frame();
  ASSERT_TRUE(refused) << runner.log();
  EXPECT_NE(refused->find("over this runner's maximum of 60 s"), std::string::npos) << *refused;

  // A file that no longer parses: logged, nothing changes, the runner serves on.
  mark = runner.log().size();
  write_file(runner.config_path(), edited + "max_sessions = nope\n");
  ASSERT_EQ(kill(runner.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_log(runner, "SIGHUP: config not reloaded", mark)) << runner.log();
  RawClient still(runner.socket());
  ASSERT_TRUE(still.send_frame(run_with_timeout(3, 60)));
  auto ok = still.read_frame();
  ASSERT_TRUE(ok) << runner.log();
  EXPECT_EQ(json_field(*ok, "/type"), "accepted") << *ok;
  EXPECT_EQ(runner.stop(), 0);
}

// check-config and serve exit 78 on a config error, naming the file and line (as sshd -t).
TEST_F(RunnerReload, ConfigErrorsExit78WithFileAndLine) {
  const std::string dir = make_temp_dir();
  const std::string conf = dir + "/motor-runner.conf";
  write_file(conf, "# a comment\ncache_paths = " + dir + "/missing-cache\n");
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"check-config", conf}, std::vector<std::string>{"serve", "--config", conf}}) {
    const std::string out = dir + "/out";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FILE* f = freopen(out.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> argv{const_cast<char*>(MOTOR_RUNNER_BIN)};
      for (const auto& a : verb) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(MOTOR_RUNNER_BIN, argv.data());
      _exit(127);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 78) << verb[0] << ": " << read_file(out);
    EXPECT_NE(read_file(out).find("config " + conf + " line 2: cache_paths: "), std::string::npos) << read_file(out);
  }
  write_file(conf, "max_sessions = 5\n");
  EXPECT_EQ(system((std::string(MOTOR_RUNNER_BIN) + " check-config " + conf + " >/dev/null").c_str()), 0);
  remove_tree(dir);
}

}  // namespace
}  // namespace motor::test
