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

#include "base/fd_table.hpp"
#include "base/heap_reuse.hpp"
#include "motor/error_kind.hpp"
#include "gate/gate_run.hpp"
#include "motor/test_switches.hpp"
#include "motor/version.hpp"
#include "reactor/pool_work.hpp"
#include "config/config.hpp"
#include "runner/connect.hpp"
#include "runner/delegated_cgroup.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/runner_cli.hpp"

namespace {

int usage_error(const std::string& message) {
  fmt::print(stderr, "motor-runner: {}\n{}", message, motor::cli::usage_text(motor::runner::runner_program()));
  return 64;
}

constexpr int kExitConfig = 78;  // EX_CONFIG, as sshd -t
// The descriptor table grown at start (base/fd_table.hpp): the packaged unit's LimitNOFILE, so
// that no session or job count the service allows grows it later; 512 KiB of kernel memory.
constexpr std::size_t kReservedDescriptors = 65536;

int config_error(const std::string& message) {
  fmt::print(stderr, "motor-runner: {}\n", message);
  return kExitConfig;
}

// The generated reference texts (`motor-runner docs --...`).
int print_docs(const motor::cli::ParsedCommand& cmd) {
  using namespace motor;
  using namespace motor::runner;
  using namespace motor::config;
  if (cmd.has("--config-reference")) fmt::print("{}", config_reference_markdown());
  else if (cmd.has("--config-man")) fmt::print("{}", config_man_page());
  else if (cmd.has("--man")) fmt::print("{}", motor::cli::man_page(runner_program()));
  else if (cmd.has("--completion")) fmt::print("{}", motor::cli::bash_completion(runner_program()));
  else return usage_error("docs needs one of --config-reference, --config-man, --man, --completion");
  return 0;
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

// `gate`: the attacks named by --attack (comma lists, repeatable), all when none.
int run_gate_verb(const motor::cli::ParsedCommand& cmd, const motor::config::Config& config, const std::string& origin) {
  motor::gate::GateOptions gate;
  if (origin != motor::config::kEmbeddedConfigOrigin) gate.config_path = origin;
  if (const std::string* dir = cmd.value("--state-dir")) gate.state_dir = *dir;
  gate.json = cmd.has("--json");
  if (cmd.has("--attack")) {
    for (const auto& list : cmd.values.at("--attack")) {
      if (auto s = motor::gate::add_attack_list(list, gate.attacks); !s) return usage_error(s.error().message);
    }
  }
  return motor::gate::run_gate(config, gate);
}

// `serve`: the runner on one loop until it stops; SIGHUP reads `origin` again.
int serve(const motor::config::Config& config, const std::string& origin) {
  using namespace motor;
  using namespace motor::runner;
  using namespace motor::config;
  uv_loop_t loop;
  if (const int rc = uv_loop_init(&loop); rc != 0) {
    log_error("cannot start: the event loop: {}", uv_strerror(rc));
    return 1;
  }
  int code = 0;
  {
    Runner runner(&loop, config);
    if (origin != motor::config::kEmbeddedConfigOrigin) {
      // The command line's overrides hold for a reloaded file too.
      runner.set_config_source([origin, state_dir = config.state_dir, socket = config.socket_path, parent = config.cgroup_parent] {
        auto next = load_config_file(origin);
        if (next) {
          next->state_dir = state_dir;
          next->socket_path = socket;
          next->cgroup_parent = parent;
        }
        return next;
      });
    }
    if (auto s = runner.start(); !s) {
      log_error("cannot start: {}", s.error().message);
      code = motor::kind_of(s.error()) == motor::ErrorKind::kConfig ? kExitConfig : 1;
    } else {
      uv_run(&loop, UV_RUN_DEFAULT);
      if (const auto& failed = runner.start_failure()) {
        code = failed->code == "config" ? kExitConfig : 1;
      } else {
        log_info("stopped");
      }
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

// `serve`'s process-wide set-up: the log, a test build's warnings, the open-file limit, the
// delegated cgroup. False when the runner cannot start (the reason is logged).
bool prepare_to_serve(motor::config::Config& config) {
  using namespace motor;
  log_init();
  log_set_level(config.log_level);
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
  // Grown now, with one thread, not on the loop under the first burst of jobs (fd_table.hpp).
  if (motor::reserve_fd_table(kReservedDescriptors) == 0) log_warning("could not grow the descriptor table up front");
  // After the line above, which wants the process to have one thread.
  if (auto batch = motor::reactor::start_pool_threads_as_batch(); !batch) {
    log_warning("libuv's pool threads keep the runner's policy: {}", batch.error().message);
  }
  if (geteuid() != 0) log_warning("not running as root: cgroups, accounts and sandboxes will likely fail");
  if (config.cgroup_mode != motor::config::CgroupMode::kV1) {
    auto delegated = motor::runner::enter_delegated_cgroup(config.cgroup_parent);
    if (!delegated) {
      log_error("cannot start: the delegated cgroup: {}", delegated.error().message);
      return false;
    }
    if (*delegated) {
      log_info("cgroups: systemd delegated {}; jobs go under it", **delegated);
      config.cgroup_parent = **delegated;
    }
  }
  return true;
}

// The verbs that need no config: --help, docs, print-config. nullopt for every other verb.
std::optional<int> run_verb_without_config(const motor::cli::ParsedCommand& cmd) {
  using motor::runner::runner_program;
  if (cmd.verb.empty()) {
    if (!cmd.help) return usage_error("no command given");
    fmt::print("{}", motor::cli::usage_text(runner_program()));
    return 0;
  }
  if (cmd.help) {
    fmt::print("{}", motor::cli::verb_help(runner_program(), *motor::cli::find_verb(runner_program(), cmd.verb)));
    return 0;
  }
  if (cmd.verb == "docs") return print_docs(cmd);
  if (cmd.verb == "print-config") {
    fmt::print("{}", motor::config::default_config_text());
    return 0;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  motor::keep_large_buffers_on_the_heap();
  using namespace motor;
  using namespace motor::runner;
  using namespace motor::config;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version") {
      fmt::print("motor-runner {} (protocol {})\n", motor::kVersion, motor::kProtocolVersion);
      return 0;
    }
    if (a.rfind("--test-", 0) == 0) {
      if (auto problem = take_test_flag(a); !problem.empty()) return usage_error(problem);
      continue;
    }
    args.push_back(a);
  }
  auto parsed = motor::cli::parse_command(runner_program(), args);
  if (!parsed) return usage_error(parsed.error().message);
  const motor::cli::ParsedCommand& cmd = *parsed;
  if (auto code = run_verb_without_config(cmd)) return *code;
  const bool takes_file = cmd.verb == "check-config";
  if (cmd.operands.size() > (takes_file ? 1U : 0U)) return usage_error("unexpected argument " + cmd.operands.back());
  std::optional<std::string> config_path;
  if (const std::string* c = cmd.value("--config")) config_path = *c;
  if (takes_file && !cmd.operands.empty()) config_path = cmd.operands.front();
  std::string origin;
  auto config = load_runner_config(config_path, origin);
  if (!config) return config_error(config.error().message);
  if (cmd.verb == "check-config") {
    fmt::print("motor-runner: {} is valid\n", origin);
    return 0;
  }
  if (cmd.verb == "gate") return run_gate_verb(cmd, *config, origin);
  if (const std::string* dir = cmd.value("--state-dir")) config->state_dir = *dir;
  if (const std::string* sock = cmd.value("--socket")) config->socket_path = *sock;
  if (cmd.verb == "connect") {
    std::optional<std::string> caller;
    if (const std::string* c = cmd.value("--caller")) caller = *c;
    return run_connect_bridge(config->socket_path, caller);
  }

  if (config->state_dir.empty() || config->state_dir[0] != '/') return usage_error("--state-dir must be an absolute path");
  if (config->socket_path.empty() || config->socket_path[0] != '/') return usage_error("--socket must be an absolute path");
  if (!prepare_to_serve(*config)) return 1;
  return serve(*config, origin);
}
