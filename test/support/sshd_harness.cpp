#include "support/sshd_harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace motor::test {
namespace {

int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool accepts_on(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

bool alive(pid_t pid) { return kill(pid, 0) == 0; }

// Ends processes that are not our children (control masters daemonize): SIGCONT in case one
// was stopped, SIGTERM, then SIGKILL after `grace`.
void end_processes(const std::vector<pid_t>& pids, std::chrono::milliseconds grace = std::chrono::milliseconds(3000)) {
  for (pid_t p : pids) {
    kill(p, SIGTERM);
    kill(p, SIGCONT);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (pid_t p : pids) {
    while (alive(p) && std::chrono::steady_clock::now() < deadline) {
      waitpid(p, nullptr, WNOHANG);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (alive(p)) kill(p, SIGKILL);
    waitpid(p, nullptr, WNOHANG);
  }
}

void descendants(pid_t pid, std::vector<pid_t>& out) {
  for (pid_t c : children_of(pid)) {
    descendants(c, out);
    out.push_back(c);
  }
}

}  // namespace

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(e.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

std::string comm_of(pid_t pid) {
  std::string c = read_file(fmt::format("/proc/{}/comm", pid));
  if (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

std::string sshd_binary() { return access("/usr/sbin/sshd", X_OK) == 0 ? "/usr/sbin/sshd" : ""; }

SshServer::SshServer() {
  dir_ = make_temp_dir();
  // sshd reads authorized_keys as the account logging in (motor): the directory must let it
  // through and those files must be readable; the private keys stay 0600.
  chmod(dir_.c_str(), 0711);
  config_ = dir_ + "/sshd_config";
  runtime_dir_ = dir_ + "/run";
  mkdir(runtime_dir_.c_str(), 0700);
}

SshServer::~SshServer() {
  stop_masters();
  if (pid_ > 0) {
    std::vector<pid_t> sessions;
    descendants(pid_, sessions);
    end_processes(sessions);
    kill(pid_, SIGTERM);
    for (int i = 0; i < 500 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  remove_tree(dir_);
}

void SshServer::stop_masters() {
  // Masters and any ssh still running name the control socket (under our runtime dir) in their
  // command line; nothing else on the host does.
  std::vector<pid_t> ours;
  for (pid_t p : processes_with(runtime_dir_ + "/")) {
    if (p != getpid()) ours.push_back(p);
  }
  end_processes(ours);
}

std::string SshServer::log() const { return read_file(dir_ + "/sshd.log"); }

std::string SshServer::make_key(const std::string& name) {
  const std::string path = dir_ + "/" + name;
  run_program({"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", path});
  return path;
}

void SshServer::authorize(const std::string& account, const std::string& options, const std::string& key_path) {
  const std::string path = dir_ + "/authorized_keys." + account;
  {
    std::ofstream out(path, std::ios::app);
    out << options << (options.empty() ? "" : " ") << read_file(key_path + ".pub");
  }
  chmod(path.c_str(), 0644);
}

std::string SshServer::bridge_options(const std::string& runner_socket, const std::string& caller) {
  return fmt::format(R"(restrict,command="{}{} --socket {}")", MOTOR_BRIDGE_BIN,
                     caller.empty() ? "" : " --caller " + caller, runner_socket);
}

std::string SshServer::runner_connect_options(const std::string& runner_socket, const std::string& caller) {
  return fmt::format(R"(restrict,command="{} connect{} --socket {}")", MOTOR_RUNNER_BIN,
                     caller.empty() ? "" : " --caller " + caller, runner_socket);
}

bool SshServer::start() {
  // sshd's privilege separation directory, which its service unit would make.
  mkdir("/run/sshd", 0755);
  const std::string host_key = make_key("host_key");
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = free_loopback_port();
    write_file(config_, fmt::format(R"(ListenAddress 127.0.0.1
Port {0}
HostKey {1}
PidFile {2}/sshd.pid
AuthorizedKeysFile {2}/authorized_keys.%u
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AllowUsers motor root
PermitRootLogin forced-commands-only
LogLevel VERBOSE
)",
                                    port_, host_key, dir_));
    write_file(dir_ + "/ssh_config", fmt::format(R"(Host *
  IdentitiesOnly yes
  UserKnownHostsFile {0}/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  LogLevel ERROR
)",
                                                 dir_));
    write_file(dir_ + "/known_hosts", fmt::format("[127.0.0.1]:{} {}", port_, read_file(host_key + ".pub")));
    pid_ = fork();
    if (pid_ == 0) {
      const int log = ::open((dir_ + "/sshd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      const int in = ::open("/dev/null", O_RDONLY);
      dup2(in, 0);
      dup2(log, 1);
      dup2(log, 2);
      execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", config_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      if (accepts_on(port_)) return true;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;  // most likely the port was taken in between: another one
  }
  return false;
}

std::string SshServer::ssh_command(const std::string& key_path) const {
  return fmt::format("ssh -F {}/ssh_config -i {}", dir_, key_path);
}

std::string SshServer::url(const std::string& account) const { return fmt::format("ssh://{}@127.0.0.1:{}", account, port_); }

std::vector<std::string> SshServer::client_env(const std::string& key_path) const {
  return {"MOTOR_SSH_COMMAND=" + ssh_command(key_path), "XDG_RUNTIME_DIR=" + runtime_dir_, "MOTOR_HOST=", "MOTOR_SOCKET="};
}

pid_t SshServer::master_pid(const std::string& control_path, const std::string& key_path) const {
  auto r = run_program({"/usr/bin/ssh", "-F", dir_ + "/ssh_config", "-i", key_path, "-S", control_path, "-O", "check",
                        "127.0.0.1"},
                       {}, std::chrono::seconds(5));
  const auto at = r.err.find("pid=");
  return r.exit_code == 0 && at != std::string::npos ? static_cast<pid_t>(std::atoi(r.err.c_str() + at + 4)) : -1;
}

std::vector<std::string> SshServer::control_sockets() const {
  auto paths = glob_paths(runtime_dir_ + "/motor-ssh/*");
  std::erase_if(paths, [](const std::string& p) { return p.ends_with(".keeper"); });
  return paths;
}

std::vector<std::string> SshServer::keeper_sockets() const { return glob_paths(runtime_dir_ + "/motor-ssh/*.keeper"); }

CommandResult SshServer::motor(const std::string& key_path, const std::vector<std::string>& args, const std::string& account,
                               const std::string& cwd, std::chrono::seconds timeout) const {
  std::vector<std::string> argv{MOTOR_CLIENT_BIN, "--host", url(account)};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, client_env(key_path), timeout, cwd.empty() ? dir_ : cwd);
}

}  // namespace motor::test
