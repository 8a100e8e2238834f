// The `motor` command line: options anywhere, `--opt=value`, the command after `--` or `-c`,
// sizes, the socket default, and usage errors that name the problem.
#include "client/cli.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motor::client {
namespace {

using Args = std::vector<std::string>;

CliOptions ok(const Args& args, const char* env_socket = nullptr) {
  auto o = parse_cli(args, env_socket);
  EXPECT_TRUE(o.ok()) << (o.ok() ? "" : o.error().message);
  return o.ok() ? *o : CliOptions{};
}

std::string usage_error(const Args& args) {
  auto o = parse_cli(args, nullptr);
  EXPECT_FALSE(o.ok()) << "parsed, but a usage error was expected";
  if (o.ok()) return "";
  EXPECT_EQ(o.error().code, "usage");
  return o.error().message;
}

bool contains(const std::string& haystack, std::string_view needle) { return haystack.find(needle) != std::string::npos; }

TEST(Cli, RunWithArgv) {
  const CliOptions o = ok({"run", "--", "cargo", "test", "--release"});
  EXPECT_EQ(o.command, "run");
  EXPECT_EQ(o.argv, (Args{"cargo", "test", "--release"}));
  EXPECT_FALSE(o.shell_command.has_value());
  EXPECT_EQ(o.workspace_key, "default");
  EXPECT_EQ(o.cwd, "");
  EXPECT_FALSE(o.timeout_s.has_value());
  EXPECT_FALSE(o.cpus.has_value());
  EXPECT_FALSE(o.memory_bytes.has_value());
  EXPECT_TRUE(o.env.empty());
  EXPECT_FALSE(o.json);
}

TEST(Cli, RunWithShellCommand) {
  const CliOptions o = ok({"run", "-c", "make -j4 && make test"});
  EXPECT_EQ(o.shell_command, std::optional<std::string>("make -j4 && make test"));
  EXPECT_TRUE(o.argv.empty());
}

TEST(Cli, OptionsBeforeThePositional) {
  const CliOptions o = ok({"--socket", "/tmp/s", "--timeout", "30", "-w", "ws", "run", "--", "true"});
  EXPECT_EQ(o.socket_path, "/tmp/s");
  EXPECT_EQ(o.timeout_s, std::optional<int64_t>(30));
  EXPECT_EQ(o.workspace_key, "ws");
  EXPECT_EQ(o.argv, (Args{"true"}));
}

TEST(Cli, OptionsAfterThePositional) {
  const CliOptions o = ok({"run", "--cwd", "sub/dir", "--cpus", "2", "--json", "--socket", "/tmp/s", "--", "true"});
  EXPECT_EQ(o.cwd, "sub/dir");
  EXPECT_EQ(o.cpus, std::optional<int64_t>(2));
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.socket_path, "/tmp/s");
}

TEST(Cli, OptionsAroundThePositional) {
  const CliOptions o = ok({"--json", "status", "--socket", "/s", "01890a5d-ac96-774b-bcce-b302099a8057"});
  EXPECT_EQ(o.command, "status");
  EXPECT_EQ(o.job_id, "01890a5d-ac96-774b-bcce-b302099a8057");
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.socket_path, "/s");
}

TEST(Cli, InlineValues) {
  const CliOptions o = ok({"run", "--timeout=45", "--cpus=3", "--memory=512M", "--cwd=a=b", "--workspace=w",
                           "--env=RUST_LOG=debug", "--socket=/x", "--", "ls"});
  EXPECT_EQ(o.timeout_s, std::optional<int64_t>(45));
  EXPECT_EQ(o.cpus, std::optional<int64_t>(3));
  EXPECT_EQ(o.memory_bytes, std::optional<int64_t>(int64_t{512} << 20));
  EXPECT_EQ(o.cwd, "a=b");  // only the first '=' separates
  EXPECT_EQ(o.workspace_key, "w");
  ASSERT_EQ(o.env.size(), 1u);
  EXPECT_EQ(o.env[0], (std::pair<std::string, std::string>{"RUST_LOG", "debug"}));
  EXPECT_EQ(o.socket_path, "/x");
}

TEST(Cli, InlineEmptyValue) {
  EXPECT_EQ(ok({"run", "--cwd=", "--", "ls"}).cwd, "");
}

TEST(Cli, EverythingAfterDoubleDashIsTheCommand) {
  const CliOptions o = ok({"run", "--json", "--", "ls", "--timeout", "5", "-c", "x", "--", "-w"});
  EXPECT_TRUE(o.json);
  EXPECT_FALSE(o.timeout_s.has_value());
  EXPECT_FALSE(o.shell_command.has_value());
  EXPECT_EQ(o.argv, (Args{"ls", "--timeout", "5", "-c", "x", "--", "-w"}));
}

TEST(Cli, EnvRepeats) {
  const CliOptions o = ok({"run", "--env", "A=1", "-e", "B=", "--env", "C=x=y", "-c", "env"});
  ASSERT_EQ(o.env.size(), 3u);
  EXPECT_EQ(o.env[0], (std::pair<std::string, std::string>{"A", "1"}));
  EXPECT_EQ(o.env[1], (std::pair<std::string, std::string>{"B", ""}));
  EXPECT_EQ(o.env[2], (std::pair<std::string, std::string>{"C", "x=y"}));
}

TEST(Cli, Sizes) {
  EXPECT_EQ(ok({"run", "--memory", "512", "-c", "x"}).memory_bytes, std::optional<int64_t>(512));
  EXPECT_EQ(ok({"run", "--memory", "64K", "-c", "x"}).memory_bytes, std::optional<int64_t>(64 * 1024));
  EXPECT_EQ(ok({"run", "--memory", "256M", "-c", "x"}).memory_bytes, std::optional<int64_t>(int64_t{256} << 20));
  const CliOptions g = ok({"run", "--memory", "2G", "-c", "x"});
  EXPECT_EQ(g.memory_bytes, std::optional<int64_t>(int64_t{2} << 30));
  EXPECT_EQ(g.memory, std::optional<std::string>("2G"));
  EXPECT_EQ(ok({"run", "--memory", "1g", "-c", "x"}).memory_bytes, std::optional<int64_t>(int64_t{1} << 30));
}

TEST(Cli, BadSizes) {
  for (const char* bad : {"0", "2T", "abc", "-1G", "1.5G", ""}) {
    EXPECT_TRUE(contains(usage_error({"run", "--memory", bad, "-c", "x"}), "--memory: expected a size such as 512M or 2G"))
        << bad;
  }
}

TEST(Cli, SocketDefault) {
  EXPECT_EQ(ok({"list"}).socket_path, "/run/motor/motor.sock");
  EXPECT_EQ(ok({"list"}, "").socket_path, "/run/motor/motor.sock");
  EXPECT_EQ(ok({"list"}, "/tmp/from-env.sock").socket_path, "/tmp/from-env.sock");
  EXPECT_EQ(ok({"list", "--socket", "/tmp/flag.sock"}, "/tmp/from-env.sock").socket_path, "/tmp/flag.sock");
}

TEST(Cli, OtherCommands) {
  const std::string job = "01890a5d-ac96-774b-bcce-b302099a8057";
  EXPECT_EQ(ok({"cancel", job}).job_id, job);
  EXPECT_EQ(ok({"status"}).job_id, "");
  EXPECT_EQ(ok({"list", "--json"}).command, "list");
  const CliOptions a = ok({"attach", job, "--from-seq", "17"});
  EXPECT_EQ(a.command, "attach");
  EXPECT_EQ(a.job_id, job);
  EXPECT_EQ(a.from_seq, 17);
  EXPECT_EQ(ok({"attach", job}).from_seq, 1);
}

TEST(Cli, NoCommand) {
  EXPECT_TRUE(contains(usage_error({}), "no command given"));
  EXPECT_TRUE(contains(usage_error({"--json"}), "no command given"));
  // "--" makes everything after it the job's command, even a word like "run".
  EXPECT_TRUE(contains(usage_error({"--", "run"}), "no command given"));
}

TEST(Cli, RunNeedsACommand) {
  EXPECT_TRUE(contains(usage_error({"run"}), "run needs a command"));
  EXPECT_TRUE(contains(usage_error({"run", "--"}), "run needs a command"));
}

TEST(Cli, RunCommandWithoutDoubleDash) {
  EXPECT_TRUE(contains(usage_error({"run", "ls", "foo"}), "run takes the command after --"));
  // The command's own options are read as motor's until "--": the first unknown one is named.
  EXPECT_TRUE(contains(usage_error({"run", "ls", "-l"}), "unknown option -l"));
}

TEST(Cli, BothShellCommandAndArgv) {
  EXPECT_TRUE(contains(usage_error({"run", "-c", "ls", "--", "ls"}), "give either -c 'SHELL COMMAND' or -- CMD ARGS, not both"));
}

TEST(Cli, BadNumbers) {
  for (const char* opt : {"--timeout", "--cpus", "--from-seq"}) {
    for (const char* bad : {"0", "-5", "abc", "10s", "1.5", "", "99999999999999999999"}) {
      const std::string msg = usage_error({"run", opt, bad, "-c", "x"});
      EXPECT_TRUE(contains(msg, std::string(opt) + " needs a positive whole number, got \"" + bad + "\"")) << msg;
    }
  }
}

TEST(Cli, MissingValue) {
  EXPECT_TRUE(contains(usage_error({"run", "-c", "x", "--timeout"}), "--timeout needs a value"));
  EXPECT_TRUE(contains(usage_error({"run", "-c"}), "-c needs a value"));
  EXPECT_TRUE(contains(usage_error({"list", "--socket"}), "--socket needs a value"));
}

TEST(Cli, UnknownOption) {
  EXPECT_TRUE(contains(usage_error({"run", "--bogus", "-c", "x"}), "unknown option --bogus"));
  EXPECT_TRUE(contains(usage_error({"run", "--bogus=1", "-c", "x"}), "unknown option --bogus"));
  EXPECT_TRUE(contains(usage_error({"-x", "list"}), "unknown option -x"));
}

TEST(Cli, BadEnv) {
  EXPECT_TRUE(contains(usage_error({"run", "--env", "NOVALUE", "-c", "x"}), "--env needs NAME=VALUE"));
  EXPECT_TRUE(contains(usage_error({"run", "--env", "=v", "-c", "x"}), "--env needs NAME=VALUE"));
}

TEST(Cli, UnknownCommand) {
  EXPECT_TRUE(contains(usage_error({"launch"}), "unknown command \"launch\""));
}

TEST(Cli, WrongNumberOfJobIds) {
  EXPECT_TRUE(contains(usage_error({"cancel"}), "cancel needs exactly one job id"));
  EXPECT_TRUE(contains(usage_error({"attach", "a", "b"}), "attach needs exactly one job id"));
  EXPECT_TRUE(contains(usage_error({"status", "a", "b"}), "status takes at most one job id"));
  EXPECT_TRUE(contains(usage_error({"list", "a"}), "list takes no arguments"));
}

TEST(Cli, OnlyRunTakesACommand) {
  EXPECT_TRUE(contains(usage_error({"list", "--", "ls"}), "only run takes a command"));
  EXPECT_TRUE(contains(usage_error({"status", "-c", "ls"}), "only run takes a command"));
}

TEST(Cli, UsageTextNamesEveryCommandAndExitCode) {
  const std::string u = usage_text();
  for (const char* word : {"motor run", "motor attach", "motor status", "motor cancel", "motor list", "MOTOR_SOCKET",
                           "124", "130", "75", "69", "64"}) {
    EXPECT_TRUE(contains(u, word)) << word;
  }
}

TEST(Cli, ScreenTakesExactlyOneChange) {
  EXPECT_EQ(ok({"screen", "main..HEAD"}).screen_range, "main..HEAD");
  EXPECT_EQ(ok({"screen", "--diff", "f.diff", "--json"}).screen_diff, std::optional<std::string>("f.diff"));
  EXPECT_TRUE(ok({"screen", "--stdin"}).screen_stdin);
  EXPECT_TRUE(ok({"screen", "--rules"}).screen_rules);
  EXPECT_TRUE(contains(usage_error({"screen"}), "exactly one of"));
  EXPECT_TRUE(contains(usage_error({"screen", "a..b", "--stdin"}), "exactly one of"));
  EXPECT_TRUE(contains(usage_error({"screen", "a..b", "c..d"}), "screen takes one"));
  EXPECT_TRUE(contains(usage_error({"run", "--stdin", "-c", "x"}), "are for screen"));
  EXPECT_TRUE(is_screen_command({"--json", "screen", "--bogus"}));
  EXPECT_FALSE(is_screen_command({"run", "--", "screen"}));
}

TEST(Cli, UntrustedIsForRunAndPrepare) {
  const CliOptions o = ok({"run", "--untrusted", "--base", "origin/main", "--", "make"});
  EXPECT_TRUE(o.untrusted);
  EXPECT_EQ(o.base, "origin/main");
  EXPECT_TRUE(ok({"workspace", "prepare", "--untrusted"}).untrusted);
  EXPECT_TRUE(contains(usage_error({"list", "--untrusted"}), "--untrusted is for run and workspace prepare"));
  EXPECT_TRUE(contains(usage_error({"run", "--untrusted", "--no-sync", "--", "make"}), "--no-sync"));
  EXPECT_TRUE(contains(usage_error({"run", "--base", "main", "--", "make"}), "--base goes with --untrusted"));
  EXPECT_TRUE(contains(usage_error({"run", "--untrusted", "--base", "-x", "--", "make"}), "--base needs a revision"));
}

}  // namespace
}  // namespace motor::client
