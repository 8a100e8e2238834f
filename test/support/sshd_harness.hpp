// Test support: a real OpenSSH server on 127.0.0.1 and a free port, with a temporary config,
// host key, user keys and authorized_keys files in conf/authorized_keys.example's form, for the
// remote-caller tests and benchmark. The host's own sshd and ssh configuration are never read or
// touched: sshd runs with -f and the clients with -F, UserKnownHostsFile and control sockets in
// the temporary directory. The destructor stops every control master the clients left, every
// session sshd forked and sshd itself, by pid, and removes the directory, also when a test fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "support/runner_harness.hpp"

namespace motor::test {

// sshd's path, or "" when openssh-server is not installed (scripts/setup installs it).
std::string sshd_binary();

class SshServer {
 public:
  SshServer();
  ~SshServer();
  SshServer(const SshServer&) = delete;
  SshServer& operator=(const SshServer&) = delete;

  // Writes the config and starts sshd; false (with the log in `log()`) if it did not come up.
  bool start();
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  std::string log() const;

  // A new key pair named `name`; returns the private key's path.
  std::string make_key(const std::string& name);
  // Appends one authorized_keys line for `account` (motor or root): `options` (e.g.
  // `restrict,command="..."`, or "" for a key with no forced command) and the key's public half.
  void authorize(const std::string& account, const std::string& options, const std::string& key_path);
  // The forced-command options of conf/authorized_keys.example, pointed at this build's
  // motor-bridge and the test runner's socket; no caller for "".
  static std::string bridge_options(const std::string& runner_socket, const std::string& caller);
  // The same with the older form of the line, `motor-runner connect` (still served).
  static std::string runner_connect_options(const std::string& runner_socket, const std::string& caller);

  // MOTOR_SSH_COMMAND for a caller with this key (`-F` the temporary client config).
  std::string ssh_command(const std::string& key_path) const;
  // ssh://ACCOUNT@127.0.0.1:PORT
  std::string url(const std::string& account = "motor") const;
  // The environment `motor --host` runs with in the tests: MOTOR_SSH_COMMAND and
  // XDG_RUNTIME_DIR (the control sockets) inside the temporary directory.
  std::vector<std::string> client_env(const std::string& key_path) const;
  // The control master's pid for the socket at `path` (`ssh -O check`), or -1.
  pid_t master_pid(const std::string& control_path, const std::string& key_path) const;
  // The control sockets clients made so far (masters'; not their spare-session keepers').
  std::vector<std::string> control_sockets() const;
  // The spare-session keepers' sockets (src/client/ssh_spare.hpp).
  std::vector<std::string> keeper_sockets() const;
  // Runs `motor --host url(account) ARGS` with client_env(key_path), from `cwd` (default: dir()).
  CommandResult motor(const std::string& key_path, const std::vector<std::string>& args, const std::string& account = "motor",
                      const std::string& cwd = "", std::chrono::seconds timeout = std::chrono::seconds(120)) const;

 private:
  void stop_masters();
  std::string dir_, config_, runtime_dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::vector<std::string> keys_;
};

// Direct children of `pid` (from /proc/*/stat).
std::vector<pid_t> children_of(pid_t pid);
// /proc/PID/comm without its newline.
std::string comm_of(pid_t pid);

}  // namespace motor::test
