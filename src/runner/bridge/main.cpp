// motor-bridge: `motor-runner connect` as a program of its own, for the forced command of an
// authorized_keys line (conf/authorized_keys.example). Every remote call starts it, so it links
// only what bridging needs: the config file (for socket_path), the frame codec and libc, not the
// daemon's libraries (libvirt and with it gnutls, ldap, glib: measured, their loading was ~40 ms
// of each remote call on a loaded host; bench/README.md). Same options, same exit codes.
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command_spec.hpp"
#include "config/config.hpp"
#include "runner/connect.hpp"
#include "runner/runner_cli.hpp"

int main(int argc, char** argv) {
  using namespace motor;
  std::vector<std::string> args{"connect"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  const cli::ProgramSpec& program = runner::runner_program();
  auto cmd = cli::parse_command(program, args);
  if (!cmd || !cmd->operands.empty()) {
    fmt::print(stderr, "motor-bridge: {}\n{}", cmd ? "unexpected argument " + cmd->operands.front() : cmd.error().message,
               cli::verb_help(program, *cli::find_verb(program, "connect")));
    return 64;
  }
  if (cmd->help) {
    fmt::print("{}", cli::verb_help(program, *cli::find_verb(program, "connect")));
    return 0;
  }
  std::optional<std::string> config_path;
  if (const std::string* c = cmd->value("--config")) config_path = *c;
  std::string origin;
  auto config = config::load_runner_config(config_path, origin);
  if (!config) {
    fmt::print(stderr, "motor-bridge: {}\n", config.error().message);
    return 78;  // EX_CONFIG, as motor-runner
  }
  const std::string* socket = cmd->value("--socket");
  std::optional<std::string> caller;
  if (const std::string* c = cmd->value("--caller")) caller = *c;
  return runner::run_connect_bridge(socket ? *socket : config->socket_path, caller);
}
