// Issue 17, `pipestatus` through a real runner: a `command` runs under bash, whose EXIT trap
// reports its last pipeline to motor-init, which names itself for the runner
// (src/sandbox/init/init_report.hpp). What a job writes to that channel itself, or closing it,
// never changes the outcome and never yields statuses the exit code contradicts.
#include <gtest/gtest.h>

#include "conformance/vocabulary.hpp"
#include "conformance/wire_test_support.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;
using namespace vocabulary;

class RunnerPipestatus : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    runner_ = std::make_unique<RunnerProcess>();
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  // The terminal record of `command` (a shell command line).
  std::string terminal_of(const std::string& command) {
    return last_frame(run_stream(*runner_, R"({"command":)" + json_quote(command) + "}"));
  }
  std::unique_ptr<RunnerProcess> runner_;
};

bool has_pipestatus(const std::string& terminal) { return terminal.find("\"pipestatus\"") != std::string::npos; }

TEST_F(RunnerPipestatus, APipelineReportsEachStatusInTheVocabularyShape) {
  const std::string terminal = terminal_of("true | false");
  EXPECT_EQ(json_field(terminal, "/outcome"), R"({"type":"exit","code":1})") << terminal;
  EXPECT_EQ(json_field(terminal, "/pipestatus"), "[0,1]") << terminal;
  EXPECT_EQ(shape_difference(terminal, fixture("records", "terminal-pipestatus"), kTerminalFields), "") << terminal;
  // Three stages, and pipefail (the code is the rightmost failure, not the last stage).
  EXPECT_EQ(json_field(terminal_of("true | (exit 3) | true"), "/pipestatus"), "[0,3,0]");
  const std::string pipefail = terminal_of("set -o pipefail; false | true");
  EXPECT_EQ(json_field(pipefail, "/outcome/code"), "1") << pipefail;
  EXPECT_EQ(json_field(pipefail, "/pipestatus"), "[1,0]") << pipefail;
}

TEST_F(RunnerPipestatus, TheCommandRunsUnderBash) {
  auto frames = run_stream(*runner_, R"({"command":"[[ -n $BASH_VERSION ]] && echo bash"})");
  EXPECT_EQ(json_field(last_frame(frames), "/outcome/code"), "0") << last_frame(frames);
}

TEST_F(RunnerPipestatus, ASingleCommandOrAContradictedReportHasNone) {
  for (const std::string command : {"true", "exit 3", "true | false; exit 5", "true | false; true"}) {
    const std::string terminal = terminal_of(command);
    EXPECT_EQ(json_field(terminal, "/outcome/type"), "exit") << command << ": " << terminal;
    EXPECT_FALSE(has_pipestatus(terminal)) << command << ": " << terminal;
  }
}

TEST_F(RunnerPipestatus, AJobThatForgesGarblesOrClosesTheChannelGetsNoneAndItsOwnOutcome) {
  struct Case {
    std::string command, code;
  };
  for (const Case& c : {Case{"echo junk >&254; true | false", "1"},        // garbage before the trap's line
                        Case{"printf '9 9\\n' >&254; true | false", "1"},  // a second line
                        Case{"head -c 100000 /dev/zero >&254; true | false", "1"},  // more than the pipe holds
                        Case{"exec 254>&-; true | false", "1"},                       // closed: the trap writes nothing
                        Case{"exec 254>/dev/null; true | false", "1"},                // not the pipe any more
                        Case{"printf '0 7\\n' >&254; exec 254>&-; exit 0", "0"}}) {   // a claim the code contradicts
    const std::string terminal = terminal_of(c.command);
    EXPECT_EQ(json_field(terminal, "/outcome"), R"({"type":"exit","code":)" + c.code + "}") << c.command << ": " << terminal;
    EXPECT_FALSE(has_pipestatus(terminal)) << c.command << ": " << terminal;
  }
  // The trap does not write into a file the job put at the channel's fd (checked by a second job
  // in the same workspace, after the first one's trap ran).
  const std::string own_file = terminal_of("exec 254>out.txt; true | false");
  EXPECT_FALSE(has_pipestatus(own_file)) << own_file;
  const std::string check = terminal_of("test -e out.txt && test ! -s out.txt");
  EXPECT_EQ(json_field(check, "/outcome/code"), "0") << check;
}

TEST_F(RunnerPipestatus, AnArgvJobReportsNone) {
  const std::string terminal = last_frame(run_stream(*runner_, R"({"argv":["/bin/bash","-c","true | false"]})"));
  EXPECT_EQ(json_field(terminal, "/outcome/code"), "1") << terminal;
  EXPECT_FALSE(has_pipestatus(terminal)) << terminal;
}

TEST_F(RunnerPipestatus, ThePipestatusOfAFinishedJobSurvivesARunnerRestart) {
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"false | true"}})"));
  const auto frames = read_until_terminal(c);
  ASSERT_FALSE(frames.empty());
  const std::string job_id = json_field(frames.front(), "/job_id");
  EXPECT_EQ(json_field(last_frame(frames), "/pipestatus"), "[1,0]") << last_frame(frames);
  const std::string after = terminal_after_a_crash(*runner_, job_id);
  EXPECT_EQ(json_field(after, "/pipestatus"), "[1,0]") << after;
}

}  // namespace
}  // namespace motor::test
