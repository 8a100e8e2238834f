// motor-runner: serve (the daemon), connect (the SSH bridge), gate (the operator isolation tests).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gate/gate_run.hpp"
#include "motor/test_switches.hpp"
#include "motor/version.hpp"
#include "config/config.hpp"
#include "runner/connect.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"

namespace {

constexpr const char* kUsage = R"(usage:
  motor-runner serve [--config FILE] [--state-dir DIR] [--socket PATH]
  motor-runner connect [--caller NAME] [--config FILE] [--socket PATH]
  motor-runner gate [--config FILE] [--state-dir DIR] [--attack ID[,ID...]] [--json]
  motor-runner --version

serve    runs the daemon on one event loop (as root); without --config it uses the embedded
         default config (motor-runner print-config shows it).
connect  bridges stdin/stdout to the runner's socket, for an authorized_keys forced command:
           command="motor-runner connect --caller alice" ssh-ed25519 ...
gate     host checks, then attacks run as real jobs through a runner started with this config
         (temporary state directory and socket unless --state-dir); exit 0 only if every
         control held (docs/server-gate.md). --attack runs only the named attacks.
)";

struct Options {
  std::string command;
  std::optional<std::string> config, state_dir, socket, caller;
  bool json = false;
  std::vector<std::string> attacks;  // gate --attack
};

int usage_error(const std::string& message) {
  fmt::print(stderr, "motor-runner: {}\n{}", message, kUsage);
  return 64;
}

#ifdef MOTOR_TESTING
constexpr bool kBuiltForTesting = true;
#else
constexpr bool kBuiltForTesting = false;
#endif

// `--test-*` flags: accepted only by motor-runner-testing (include/motor/test_switches.hpp).
// Returns an error message, or "" when the flag was taken.
std::string take_test_flag(const std::string& arg) {
  if (!kBuiltForTesting)
    return arg + " is refused: this motor-runner was not built for testing (test switches exist only in "
                 "motor-runner-testing, which is never installed)";
  const auto eq = arg.find('=');
  const std::string name = arg.substr(0, eq);
  const std::string value = eq == std::string::npos ? std::string() : arg.substr(eq + 1);
  if (value.empty()) return name + " needs =VALUE";
  if (name == "--test-weaken") {
    const auto control = motor::Control::parse(value);
    if (!control) return "--test-weaken: unknown control " + value;
    motor::test_switches().weakened.push_back(*control);
    return "";
  }
  if (name == "--test-allow-destination") {
    motor::test_switches().allowed_destinations.push_back(value);
    return "";
  }
  if (name == "--test-slow-state-save") {
    unsigned ms = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    if (ec != std::errc() || end != value.data() + value.size() || ms > 60000) return name + ": expected milliseconds (0-60000)";
    motor::test_switches().state_save_delay_ms = ms;
    return "";
  }
  return "unknown test switch " + name;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace motor;
  using namespace motor::runner;
  using namespace motor::config;
  Options opt;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::optional<std::string>& out) -> bool {
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        out = a.substr(eq + 1);
        return true;
      }
      if (i + 1 >= args.size()) return false;
      out = args[++i];
      return true;
    };
    if (a == "--version") {
      fmt::print("motor-runner {} (protocol {})\n", motor::kVersion, motor::kProtocolVersion);
      return 0;
    }
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    }
    bool ok = true;
    if (a == "--json") opt.json = true;
    else if (a.rfind("--attack", 0) == 0) {
      std::optional<std::string> list;
      ok = value(list);
      for (size_t start = 0; ok && start <= list->size();) {
        const size_t comma = std::min(list->find(',', start), list->size());
        if (comma > start) opt.attacks.push_back(list->substr(start, comma - start));
        start = comma + 1;
      }
    }
    else if (a.rfind("--test-", 0) == 0) {
      if (auto problem = take_test_flag(a); !problem.empty()) return usage_error(problem);
    }
    else if (a.rfind("--config", 0) == 0) ok = value(opt.config);
    else if (a.rfind("--state-dir", 0) == 0) ok = value(opt.state_dir);
    else if (a.rfind("--socket", 0) == 0) ok = value(opt.socket);
    else if (a.rfind("--caller", 0) == 0) ok = value(opt.caller);
    else if (a.rfind("--", 0) == 0) return usage_error("unknown option " + a);
    else if (opt.command.empty()) opt.command = a;
    else return usage_error("unexpected argument " + a);
    if (!ok) return usage_error(a + " needs a value");
  }
  if (opt.command.empty()) return usage_error("no command given");

  auto config = opt.config ? load_config_file(*opt.config) : parse_config(default_config_text(), "embedded default config");
  if (!config) {
    fmt::print(stderr, "motor-runner: {}\n", config.error().message);
    return 78;  // EX_CONFIG
  }
  if (opt.command == "gate") {
    if (opt.socket || opt.caller) return usage_error("gate takes --config, --state-dir and --json");
    motor::gate::GateOptions gate;
    gate.config_path = opt.config;
    gate.state_dir = opt.state_dir;
    gate.json = opt.json;
    const auto known = motor::gate::attack_ids();
    for (const auto& id : opt.attacks) {
      if (std::find(known.begin(), known.end(), id) == known.end())
        return usage_error(fmt::format("--attack: no attack {} (the attacks: {})", id, fmt::join(known, ",")));
    }
    gate.attacks = opt.attacks;
    return motor::gate::run_gate(*config, gate);
  }
  if (opt.json || !opt.attacks.empty()) return usage_error("--json and --attack are options of gate");
  if (opt.state_dir) config->state_dir = *opt.state_dir;
  if (opt.socket) config->socket_path = *opt.socket;

  if (opt.command == "print-config") {
    fmt::print("{}", default_config_text());
    return 0;
  }
  if (opt.command == "connect") return run_connect_bridge(config->socket_path, opt.caller);
  if (opt.command != "serve") return usage_error("unknown command " + opt.command);

  if (config->state_dir.empty() || config->state_dir[0] != '/') return usage_error("--state-dir must be an absolute path");
  if (config->socket_path.empty() || config->socket_path[0] != '/') return usage_error("--socket must be an absolute path");
  log_init();
  for (const auto& control : motor::weakened_control_names())
    log_warning("TEST BUILD: control {} is weakened (--test-weaken); never use this runner for real jobs", control);
  for (const auto& cidr : motor::test_switches().allowed_destinations)
    log_warning("TEST BUILD: destination {} is allowed (--test-allow-destination)", cidr);
  if (const unsigned ms = motor::test_switches().state_save_delay_ms)
    log_warning("TEST BUILD: every state save waits {} ms (--test-slow-state-save)", ms);
  // Every client session is a socket: take the whole open-file allowance the host grants.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (geteuid() != 0) log_warning("not running as root: cgroups, accounts and sandboxes will likely fail");

  uv_loop_t loop;
  uv_loop_init(&loop);
  int code = 0;
  {
    Runner runner(&loop, *config);
    if (auto s = runner.start(); !s) {
      log_error("cannot start: {}", s.error().message);
      code = 1;
    } else {
      uv_run(&loop, UV_RUN_DEFAULT);
      log_info("stopped");
    }
  }
  // Let every handle's close callback run, then release the loop.
  uv_run(&loop, UV_RUN_NOWAIT);
  uv_walk(&loop, [](uv_handle_t* h, void*) {
    if (!uv_is_closing(h)) uv_close(h, nullptr);
  }, nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return code;
}
