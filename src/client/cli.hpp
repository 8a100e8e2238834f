// The `motor` command line: parsing (pure, unit-tested) and the commands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/ssh_target.hpp"
#include "motor/expected.hpp"

namespace motor::client {

struct CliOptions {
  std::string command;                 // run | attach | status | cancel | list | drain | resume | workspace | cache | exec-remote | screen
  std::string socket_path;             // --socket, else $MOTOR_SOCKET, else the default
  std::optional<SshTarget> host;       // --host ssh://..., else $MOTOR_HOST: the runner is there
  std::string workspace_key = "default";
  bool workspace_key_given = false;          // -w: else run derives one from the checkout
  bool no_sync = false;                      // run: do not prepare the checkout first
  std::string workspace_action;              // workspace: prepare | drop | list
  std::string repository_root;               // run: set once the checkout is prepared
  std::string fill_tip_branch, fill_tip_commit;  // run: the verified default-branch tip (client/fill_tip.hpp), "" = none
  std::string cwd;
  std::optional<int64_t> timeout_s;
  std::optional<int64_t> cpus;
  std::optional<std::string> memory;   // as given ("2G"); checked here, sent as bytes
  std::optional<int64_t> memory_bytes;
  std::string network;                 // run: "" (the runner's default, offline) | offline | outbound
  std::vector<std::pair<std::string, std::string>> env;
  std::optional<std::string> shell_command;  // -c
  std::vector<std::string> argv;             // after --
  std::string job_id;                        // attach/status/cancel
  int64_t from_seq = 1;
  bool json = false;
  bool direct = false;                       // run: ask for a direct job and its secret
  std::optional<std::string> secret_file;    // run: create it for the secret; others: read it
  bool secret_stdin = false;                 // attach/status/cancel: read the secret from stdin
  bool wait = false;                         // drain: return once the runner is idle
  bool metrics = false;                      // status: print the Prometheus metrics
  std::string priority;                      // run: interactive | batch
  bool untrusted = false;                    // run, workspace prepare: the runner screens the change first
  std::string base;                          // with --untrusted: the trusted base revision (default HEAD)
  std::string screen_range;                  // screen: BASE..HEAD
  std::optional<std::string> screen_diff;    // screen --diff FILE
  bool screen_stdin = false;                 // screen --stdin
  bool screen_rules = false;                 // screen --rules: print the table (docs/change-screen.md)
  bool stdio = false;                        // exec-remote --stdio: one caller on stdin/stdout
  std::string listen_path;                   // exec-remote --listen SOCKET: callers on a 0600 socket
  std::string cache_action;                  // cache: status | clear
  std::string cache_repository;              // cache clear REPOSITORY_ROOT ("" = every repository)
};

inline constexpr const char* kDefaultSocket = "/run/motor/motor.sock";

// Options may come before or after positional arguments; everything after "--" is the command.
// Errors are usage errors: the message names the problem and the fix.
// `env_host`: $MOTOR_HOST (an explicit --socket wins over it, as --host over $MOTOR_SOCKET).
Expected<CliOptions> parse_cli(const std::vector<std::string>& args, const char* env_socket, const char* env_host = nullptr);

const char* usage_text();

// `motor screen` reports every error, a usage error too, as DO NOT EXECUTE with exit 2: true
// when the command line names that command.
bool is_screen_command(const std::vector<std::string>& args);

// Runs the parsed command; returns the process exit code.
int run_cli(const CliOptions& options);

}  // namespace motor::client
