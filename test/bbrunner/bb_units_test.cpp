// The pure pieces of issue 23: the runner's host_workspace parameter and hermetic environment,
// and motor-bb-runner's translation of a RunRequest (beside the integration tests in this folder).
#include <gtest/gtest.h>
#include <simdjson.h>

#include "bbrunner/action.hpp"
#include "runner/host_workspace.hpp"
#include "support/runner_harness.hpp"

namespace motor {
namespace {

using runner::parse_host_workspace;

TEST(HostWorkspaceParam, AbsentIsNoHostWorkspace) {
  simdjson::dom::parser p;
  auto r = parse_host_workspace(p, R"({"argv":["true"]})", false, "");
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
}

TEST(HostWorkspaceParam, OnlyAPrivilegedSessionWithABuildDirectory) {
  simdjson::dom::parser p;
  const char* params = R"({"host_workspace":{"input_root":"a/root","tmp":"a/tmp"}})";
  auto untrusted = parse_host_workspace(p, params, false, "/build");
  ASSERT_FALSE(untrusted);
  EXPECT_EQ(untrusted.error().code, "unauthorized");
  auto off = parse_host_workspace(p, params, true, "");
  ASSERT_FALSE(off);
  EXPECT_EQ(off.error().code, "bad_request");
  auto ok = parse_host_workspace(p, params, true, "/build");
  ASSERT_TRUE(ok && *ok);
  EXPECT_EQ((*ok)->input_root, "a/root");
  EXPECT_EQ((*ok)->tmp, "a/tmp");
}

TEST(HostWorkspaceParam, PathsStayRelativeWithoutDotDot) {
  simdjson::dom::parser p;
  for (const char* bad : {R"({"host_workspace":{"input_root":"/etc"}})", R"({"host_workspace":{"input_root":"a/../../x"}})",
                          R"({"host_workspace":{"input_root":""}})", R"({"host_workspace":{"input_root":7}})",
                          R"({"host_workspace":"a"})", R"({"host_workspace":{"input_root":"a","tmp":".."}})"}) {
    auto r = parse_host_workspace(p, bad, true, "/build");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, "bad_request") << bad;
  }
  auto r = parse_host_workspace(p, R"({"host_workspace":{"input_root":"./a//root/"}})", true, "/build");
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->input_root, "a/root");
}

TEST(HermeticEnv, PassesEverythingExecveCanCarry) {
  auto env = runner::hermetic_env({{"API_TOKEN", "x"}, {"PATH", "/bin"}, {"", "e"}, {"A=B", "c"}, {"N", std::string("a\0b", 3)}});
  EXPECT_EQ(env, (std::vector<std::string>{"API_TOKEN=x", "PATH=/bin"}));
}

TEST(BbRunRequest, BecomesAnExecRunOnTheInputRoot) {
  buildbarn::runner::RunRequest r;
  r.add_arguments("cc");
  r.add_arguments("-c");
  (*r.mutable_environment_variables())["PATH"] = "/usr/bin";
  r.set_working_directory("pkg");
  r.set_input_root_directory("1/root");
  r.set_temporary_directory("1/tmp");
  bbrunner::RunSettings s;
  s.network = "outbound";
  s.memory_bytes = 1 << 20;
  const std::string json = bbrunner::exec_run_request(r, s, "bb-1", 7);
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_FALSE(p.parse(json).get(e)) << json;
  EXPECT_EQ(std::string_view(e.at_pointer("/method").get_string().value()), "exec.run");
  EXPECT_EQ(std::string_view(e.at_pointer("/params/argv/1").get_string().value()), "-c");
  EXPECT_EQ(std::string_view(e.at_pointer("/params/env/PATH").get_string().value()), "/usr/bin");
  EXPECT_EQ(std::string_view(e.at_pointer("/params/cwd").get_string().value()), "pkg");
  EXPECT_EQ(std::string_view(e.at_pointer("/params/host_workspace/input_root").get_string().value()), "1/root");
  EXPECT_EQ(std::string_view(e.at_pointer("/params/host_workspace/tmp").get_string().value()), "1/tmp");
  EXPECT_EQ(std::string_view(e.at_pointer("/params/network").get_string().value()), "outbound");
  EXPECT_EQ(e.at_pointer("/params/timeout").get_int64().value(), 7);
  EXPECT_EQ(e.at_pointer("/params/memory").get_int64().value(), 1 << 20);
}

TEST(BbRunRequest, TheDeadlineBecomesWholeSecondsRoundedUp) {
  const auto now = std::chrono::system_clock::now();
  EXPECT_EQ(bbrunner::timeout_from_deadline(now + std::chrono::milliseconds(1500), now), 2);
  EXPECT_EQ(bbrunner::timeout_from_deadline(now + std::chrono::milliseconds(1), now), 1);
  EXPECT_EQ(bbrunner::timeout_from_deadline(now - std::chrono::seconds(3), now), 1);
  EXPECT_EQ(bbrunner::timeout_from_deadline(std::chrono::system_clock::time_point::max(), now), std::nullopt);
}

// `--help` is asked for: the usage on stdout, exit 0; a mistake: the usage on stderr, exit 2.
TEST(BbRunnerCommandLine, HelpPrintsTheUsageAndSucceeds) {
  auto help = test::run_program({MOTOR_BB_RUNNER_BIN, "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("usage: motor-bb-runner"), std::string::npos) << help.out;
  auto wrong = test::run_program({MOTOR_BB_RUNNER_BIN, "--no-such-option", "x"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("usage: motor-bb-runner"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace motor
