// motor: the client. See `motor --help` and docs/protocol.md.
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "client/cli.hpp"
#include "client/exit_codes.hpp"
#include "client/screen_command.hpp"
#include "motor/version.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      fmt::print("{}", motor::client::usage_text());
      return 0;
    }
    if (a == "--version") {
      fmt::print("motor {} (protocol {})\n", motor::kVersion, motor::kProtocolVersion);
      return 0;
    }
  }
  auto options = motor::client::parse_cli(args, std::getenv("MOTOR_SOCKET"), std::getenv("MOTOR_HOST"));
  if (!options && motor::client::is_screen_command(args)) {
    bool json = false;
    for (const auto& a : args) json |= a == "--json";
    return motor::client::screen_usage_error(options.error().message + " (motor screen --help)", json);
  }
  if (!options) {
    fmt::print(stderr, "motor: {}\nRun 'motor --help' for usage.\n", options.error().message);
    return motor::client::kExitUsage;
  }
  return motor::client::run_cli(*options);
}
