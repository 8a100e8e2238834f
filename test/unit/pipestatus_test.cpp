// The pipestatus channel's formats (sandbox/init/init_report.hpp, sandbox/pipestatus.hpp): what
// the shell's trap writes, the name motor-init takes, and what the runner reports of it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sandbox/init/init_report.hpp"
#include "sandbox/pipestatus.hpp"

namespace motor::sandbox {
namespace {

namespace report = init_report;

std::string name_of(std::string_view shell_report) {
  report::Statuses s;
  char name[report::kMaxName + 1];
  if (!report::parse_shell_report(shell_report, s) || !report::format_name(s, name)) return "<none>";
  return name;
}

TEST(Pipestatus, TheShellsLineBecomesTheInitsName) {
  EXPECT_EQ(name_of("0 1\n"), "|0|1");
  EXPECT_EQ(name_of("141 0 255\n"), "|141|0|255");
  EXPECT_EQ(name_of("7\n"), "|7");
  EXPECT_EQ(name_of("0 0 0 0 0 0 0\n"), "|0|0|0|0|0|0|0");  // 14 bytes: fits
}

TEST(Pipestatus, AnythingButOneLineOfStatusesIsNoReport) {
  const std::vector<std::string> bad_reports{"", "\n", "0 1", "0 1\n\n", "junk\n0 1\n", "0  1\n", " 0 1\n", "0 1 \n", "-1 0\n",
                                "256 0\n", "01 0\n", "1e2\n", "0,1\n", "0 1\nx", std::string("0\0 1\n", 5),
                                "0 0 0 0 0 0 0 0 0\n", std::string(300, '1') + "\n"};
  for (const std::string& bad : bad_reports) {
    EXPECT_EQ(name_of(bad), "<none>") << bad;
  }
  // Eight one-digit statuses parse but do not fit in a name (16 bytes): dropped, not cut.
  EXPECT_EQ(name_of("0 0 0 0 0 0 0 0\n"), "<none>");
  EXPECT_EQ(name_of("100 100 100 100\n"), "<none>");
}

TEST(Pipestatus, TheRunnerReadsTheNameAsProcShowsIt) {
  EXPECT_EQ(pipestatus_from_init_name("|0|1\n"), (std::vector<int>{0, 1}));
  EXPECT_EQ(pipestatus_from_init_name("|141|0"), (std::vector<int>{141, 0}));
  for (const std::string other : {"motor-init\n", "motor-init:s9\n", "3\n", "|\n", "||\n", "|0||1\n", "|0|1|\n", "|x\n",
                                  "|0|1|2|3|4|5|6|7\n", "0|1\n"}) {
    EXPECT_EQ(pipestatus_from_init_name(other), std::nullopt) << other;
  }
}

TEST(Pipestatus, TheRunnerReadsTheSignalFromTheSameName) {
  EXPECT_EQ(init_signal_from_name("motor-init:s9\n"), 9);
  EXPECT_EQ(init_signal_from_name("motor-init:s15\n"), 15);
  for (const std::string other : {"motor-init\n", "motor-init:s9", "motor-init:s0\n", "motor-init:s99\n",
                                  "motor-init:sx\n", "|0|1\n", ""}) {
    EXPECT_EQ(init_signal_from_name(other), 0) << other;
  }
}

TEST(Pipestatus, OnlyAPipelineTheExitCodeAgreesWithIsReported) {
  EXPECT_TRUE(pipestatus_reportable({0, 1}, 1));
  EXPECT_TRUE(pipestatus_reportable({1, 0}, 0));
  EXPECT_TRUE(pipestatus_reportable({1, 0}, 1));     // pipefail: the rightmost failure
  EXPECT_TRUE(pipestatus_reportable({0, 3, 0}, 3));  // pipefail
  EXPECT_TRUE(pipestatus_reportable({0, 0}, 0));
  EXPECT_FALSE(pipestatus_reportable({1}, 1));        // one command: its status is the outcome
  EXPECT_FALSE(pipestatus_reportable({}, 0));
  EXPECT_FALSE(pipestatus_reportable({0, 1}, 5));     // `a | b; exit 5`: the report is stale
  EXPECT_FALSE(pipestatus_reportable({0, 7}, 0));
  EXPECT_FALSE(pipestatus_reportable({2, 1}, 2));     // pipefail would give 1
  EXPECT_FALSE(pipestatus_reportable(std::vector<int>(9, 0), 0));
}

TEST(Pipestatus, TheTrapWritesToTheFdMotorInitPassesAndLeavesTheCommandAsItIs) {
  const std::string fd = std::to_string(report::kPipestatusFd);
  const std::string trap = report::kBashExitTrap;
  EXPECT_NE(trap.find("[ -p /dev/fd/" + fd + " ]"), std::string::npos) << trap;
  EXPECT_NE(trap.find(">&" + fd + ";"), std::string::npos) << trap;
  EXPECT_EQ(trap.back(), '\n');
  EXPECT_EQ(command_reporting_pipestatus("make | tee log"), trap + "make | tee log");
}

}  // namespace
}  // namespace motor::sandbox
