#include "gate/gate_setup.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "config/config.hpp"
#include "gate/attack_steps.hpp"
#include "gate/runner_session.hpp"
#include "motor/test_switches.hpp"
#include "motor/unique_fd.hpp"

namespace motor::gate {
namespace {

// The runner's stdin from /dev/null and its output into its log; never speaks to the service
// manager as if it were the production runner. Runs in the child, before exec.
void become_gate_runner(const std::string& log_path) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log < 0 || null < 0) _exit(71);
  dup2(null, 0);
  dup2(log, 1);
  dup2(log, 2);
  unsetenv("NOTIFY_SOCKET");
  unsetenv("JOURNAL_STREAM");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_PID");
}

}  // namespace

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    std::string cmdline = read_host(fmt::format("/proc/{}/cmdline", pid));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

namespace {

// The key a config line sets ("" for a comment or a blank line).
std::string line_key(const std::string& line) {
  const auto first = line.find_first_not_of(" \t");
  if (first == std::string::npos || line[first] == '#') return "";
  const auto end = line.find_first_of(" \t=", first);
  return line.substr(first, end == std::string::npos ? std::string::npos : end - first);
}

}  // namespace

Expected<std::string> derived_config(const GateOptions& options, const std::string& cgroup_parent,
                                     const std::string& extra) {
  std::string text;
  if (options.config_path) {
    std::ifstream in(*options.config_path, std::ios::binary);
    if (!in) return make_error("config", "cannot read " + *options.config_path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    text = std::string(config::default_config_text());
  }
  std::vector<std::string> replaced = {"cgroup_parent", "metrics_file", "shutdown"};
  std::istringstream extra_in(extra);
  std::string out, line;
  while (std::getline(extra_in, line)) {
    if (auto key = line_key(line); !key.empty()) replaced.push_back(std::move(key));
  }
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (std::find(replaced.begin(), replaced.end(), line_key(line)) != replaced.end()) continue;
    out += line + "\n";
  }
  out += fmt::format("# motor-runner gate: its own cgroup parent, no metrics, kill on SIGTERM\n"
                     "cgroup_parent = {}\nmetrics_file = \"\"\nshutdown = kill\n{}",
                     cgroup_parent, extra);
  if (auto parsed = config::parse_config(out, "gate config"); !parsed) return parsed.error();
  return out;
}

bool socket_answers(const std::string& path) { return RunnerSession::connect_socket(path).ok(); }

Status start_runner(const RunnerPaths& paths, const std::string& exe, pid_t& runner) {
  // A test build's weakened controls (include/motor/test_switches.hpp) go to its runner: the
  // runner applies them, the gate only says so. motor-runner has none.
  std::vector<std::string> args = {"motor-runner", "serve", "--config", paths.config, "--state-dir", paths.state_dir,
                                   "--socket", paths.socket};
  for (const auto& control : weakened_control_names()) args.push_back("--test-weaken=" + control);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return make_error("io", std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(70);
    become_gate_runner(paths.log);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  runner = pid;
  for (int i = 0; i < 1500 && !interrupted(); ++i) {
    if (socket_answers(paths.socket)) return {};
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      runner = -1;
      return make_error("runner", fmt::format("the runner exited ({}) before it listened: {}",
                                              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                                              read_host(paths.log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return make_error("runner", "the runner did not listen on " + paths.socket + " within 30 s: " + read_host(paths.log));
}

Expected<std::pair<int, int>> open_listener() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return make_error("io", "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || listen(s.get(), 16) < 0 ||
      getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) < 0) {
    return make_error("io", std::string("listener: ") + std::strerror(errno));
  }
  UniqueFd c(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const bool reachable = c && connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  c.reset();
  for (int i = 0; i < 100; ++i) {
    if (UniqueFd accepted(accept4(s.get(), nullptr, nullptr, SOCK_CLOEXEC)); accepted) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!reachable) return make_error("io", "the host cannot reach its own 127.0.0.1 listener");
  return std::pair<int, int>{s.release(), ntohs(a.sin_port)};
}

pid_t start_marker_process(const std::string& marker) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(70);
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd : {0, 1, 2}) dup2(null, fd);
    const std::string arg = "3600." + marker;
    execl("/bin/sleep", "sleep", arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

}  // namespace motor::gate
