// The command tables (issue 19): `VERB --help` shows that verb's options only, and the checked-in
// man page and completion of `motor` are what the table generates.
#include <gtest/gtest.h>


#include "cli/command_spec.hpp"
#include "client/cli_spec.hpp"
#include "runner/runner_cli.hpp"
#include "source_file.hpp"

namespace motor {
namespace {

using test::read_source_file;

TEST(CommandSpec, VerbHelpShowsThatVerbsOptionsOnly) {
  const auto& motor = client::client_program();
  const std::string run = cli::verb_help(motor, *cli::find_verb(motor, "run"));
  EXPECT_NE(run.find("--timeout S"), std::string::npos) << run;
  EXPECT_EQ(run.find("--wait"), std::string::npos) << run;
  EXPECT_EQ(run.find("--from-seq"), std::string::npos) << run;
  const auto& runner = runner::runner_program();
  const std::string gate = cli::verb_help(runner, *cli::find_verb(runner, "gate"));
  EXPECT_NE(gate.find("--attack"), std::string::npos);
  EXPECT_EQ(gate.find("--caller"), std::string::npos);
}

TEST(CommandSpec, ParserTakesOnlyTheVerbsOptions) {
  const auto& runner = runner::runner_program();
  auto ok = cli::parse_command(runner, {"gate", "--attack=a,b", "--json", "--config", "/x"});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->verb, "gate");
  EXPECT_EQ(*ok->value("--config"), "/x");
  EXPECT_TRUE(ok->has("--json"));
  auto wrong = cli::parse_command(runner, {"serve", "--caller", "x"});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("--caller is not an option of serve"), std::string::npos);
  EXPECT_FALSE(cli::parse_command(runner, {"serve", "--json=1"}).ok());
  EXPECT_FALSE(cli::parse_command(runner, {"serve", "--config"}).ok());
  EXPECT_FALSE(cli::parse_command(runner, {"serve", "--config", "a", "--config", "b"}).ok());
  auto check = cli::parse_command(runner, {"check-config", "/etc/x.conf"});
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->operands, std::vector<std::string>{"/etc/x.conf"});
}

TEST(CommandSpec, ClientManPageAndCompletionAreGenerated) {
  const char* regenerate = "run scripts/generate-docs after changing a command's options";
  EXPECT_EQ(read_source_file("docs/man/motor.1"), cli::man_page(client::client_program())) << regenerate;
  EXPECT_EQ(read_source_file("conf/bash-completion/motor"), cli::bash_completion(client::client_program())) << regenerate;
}

}  // namespace
}  // namespace motor
