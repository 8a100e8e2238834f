// motor: the client. See `motor --help` and docs/protocol.md.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/heap_reuse.hpp"
#include "client/cli.hpp"
#include "client/checkout_watch.hpp"
#include "client/cli_spec.hpp"
#include "client/exit_codes.hpp"
#include "client/screen_command.hpp"
#include "client/ssh_spare.hpp"
#include "motor/version.hpp"

int main(int argc, char** argv) {
  // Not a verb: how the client starts its own spare-session keeper (ssh_spare.hpp).
  if (argc > 1 && std::string_view(argv[1]) == motor::client::kSpareKeeperFlag) return motor::client::run_spare_keeper(argc, argv);
  // Nor is its checkout watcher (checkout_watch.hpp).
  if (argc > 1 && std::string_view(argv[1]) == motor::client::kCheckoutWatcherFlag) return motor::client::run_checkout_watcher(argc, argv);
  motor::keep_large_buffers_on_the_heap();
  std::vector<std::string> args(argv + 1, argv + argc);
  const motor::cli::ProgramSpec& program = motor::client::client_program();
  const motor::cli::VerbSpec* verb = nullptr;  // the first word that is not an option
  for (const auto& a : args) {
    if (a == "--") break;
    if (!a.empty() && a[0] != '-') {
      verb = motor::cli::find_verb(program, a);
      break;
    }
  }
  if (verb != nullptr && verb->name == "docs") {
    const bool man = std::find(args.begin(), args.end(), "--man") != args.end();
    fmt::print("{}", man ? motor::cli::man_page(program) : motor::cli::bash_completion(program));
    return 0;
  }
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      fmt::print("{}", verb != nullptr ? motor::cli::verb_help(program, *verb)
                                       : motor::cli::usage_text(program) + "\n" + std::string(program.description) + "\n");
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
