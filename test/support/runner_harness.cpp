#include "support/runner_harness.hpp"

#include <dirent.h>
#include <grp.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <simdjson.h>

#include "motor/fd_message.hpp"
#include "protocol/frame.hpp"
#include "protocol/json_writer.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::test {

namespace {

pid_t find_helper(pid_t runner, const std::string& name) {
  const std::string comm = "(" + name + ")";
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos || line.find(comm) == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == runner) return static_cast<pid_t>(std::stol(pid));
  }
  return -1;
}

}  // namespace

pid_t helper_of(pid_t runner, const std::string& name) {
  // The runner forks a helper, which then names itself: on a loaded host a test that asks
  // right after the runner listens can come between the two.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const pid_t helper = find_helper(runner, name);
    if (helper > 0 || std::chrono::steady_clock::now() >= deadline) return helper;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

pid_t job_starter_of(pid_t runner) { return helper_of(runner, "motor-starter"); }

std::set<std::string> netns_fds_of(pid_t pid) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    std::error_code lec;
    const std::string target = std::filesystem::read_symlink(e.path(), lec).string();
    if (!lec && target.starts_with("net:[")) out.insert(target);
  }
  return out;
}

std::set<std::string> full_pool(pid_t starter, size_t n, const std::string& home) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::set<std::string> pool;
  for (;;) {
    pool = netns_fds_of(starter);
    pool.erase(home);
    if (pool.size() >= n || std::chrono::steady_clock::now() > deadline) return pool;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}


bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

std::string make_temp_dir() {
  char tmpl[] = "/tmp/motor-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "";
}

void remove_tree(const std::string& path) {
  if (path.size() < 6 || path.rfind("/tmp/", 0) != 0) return;  // never anything but our temp dirs
  run_program({"/bin/rm", "-rf", "--one-file-system", path});
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string unique_marker() {
  std::random_device rd;
  return fmt::format("{}{:06}", getpid() % 1000, rd() % 1000000);
}

std::string tree_listing(const std::string& dir) {
  namespace fs = std::filesystem;
  struct stat root {};
  lstat(dir.c_str(), &root);
  std::string out = fmt::format("{:o} {}:{}\n", root.st_mode, root.st_uid, root.st_gid);
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    lstat(e.path().c_str(), &st);
    out += fmt::format("{} {:o} {}:{} {}\n", e.path().string(), st.st_mode, st.st_uid, st.st_gid, st.st_size);
    if (S_ISREG(st.st_mode)) out += read_file(e.path().string()) + "\n";
  }
  return out;
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::string cmdline = read_file(fmt::format("/proc/{}/cmdline", pid));
    for (auto& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(marker) != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

int64_t peak_rss_bytes(pid_t pid) {
  std::istringstream in(read_file(fmt::format("/proc/{}/status", pid)));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return -1;
}

CommandResult run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                          std::chrono::seconds timeout, const std::string& cwd) {
  CommandResult r;
  const std::string dir = make_temp_dir();
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int in = ::open("/dev/null", O_RDONLY);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    if (!cwd.empty() && chdir(cwd.c_str()) < 0) _exit(127);
    for (const auto& e : env_add) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.err = "timed out";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_path);
  r.err += read_file(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  rmdir(dir.c_str());
  return r;
}

RunnerProcess::RunnerProcess(std::string extra_config) : binary_(MOTOR_RUNNER_BIN) {
  dir_ = make_temp_dir();
  chmod(dir_.c_str(), 0711);  // jobs reach their workspace below it
  state_dir_ = dir_ + "/state";
  socket_ = dir_ + "/motor.sock";
  config_path_ = dir_ + "/runner.conf";
  log_path_ = dir_ + "/runner.log";
  cgroup_parent_ = "motor-test-" + unique_marker();
  // Small history by default (tests write a lot); a test's own setting wins.
  const bool own_log_size = extra_config.find("job_log_max_size") != std::string::npos;
  write_file(config_path_, fmt::format("cgroup_parent = {}\n{}{}\n", cgroup_parent_,
                                       own_log_size ? "" : "job_log_max_size = 64M\n", extra_config));
}

RunnerProcess::~RunnerProcess() {
  if (pid_ > 0) {
    if (stop(std::chrono::seconds(20)) < 0) kill9();
  }
  // Whatever a failed test left: processes in our cgroups, then the cgroups themselves.
  // (`<parent>-vm` holds the VM jobs' pids cgroups.)
  for (const std::string h : {"unified", "memory", "pids", "cpuset", "freezer", "cpu", "pids-vm"}) {
    const std::string parent = h == "pids-vm" ? fmt::format("/sys/fs/cgroup/pids/{}-vm", cgroup_parent_)
                                              : fmt::format("/sys/fs/cgroup/{}/{}", h, cgroup_parent_);
    if (DIR* d = opendir(parent.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
        const std::string cg = parent + "/" + e->d_name;
        if (h == "unified") write_file(cg + "/cgroup.kill", "1");
        for (int i = 0; i < 200 && rmdir(cg.c_str()) < 0 && errno == EBUSY; ++i) {
          std::istringstream procs(read_file(cg + "/cgroup.procs"));
          for (pid_t p; procs >> p;) kill(p, SIGKILL);
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      closedir(d);
      rmdir(parent.c_str());
    }
  }
  remove_tree(dir_);
}

bool RunnerProcess::start() {
  pid_ = fork();
  if (pid_ == 0) {
    const int log = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(log, 2);
    const int in = ::open("/dev/null", O_RDONLY);
    dup2(in, 0);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("JOURNAL_STREAM");
    std::vector<std::string> args{binary_};
    args.insert(args.end(), flags_.begin(), flags_.end());
    for (const std::string& a : {std::string("serve"), std::string("--config"), config_path_, std::string("--state-dir"),
                                 state_dir_, std::string("--socket"), socket_})
      args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary_.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 1000; ++i) {
    RawClient probe(socket_);
    if (probe.connected()) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void RunnerProcess::use_binary(std::string binary, std::vector<std::string> flags) {
  binary_ = std::move(binary);
  flags_ = std::move(flags);
}

int RunnerProcess::stop(std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

void RunnerProcess::kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string RunnerProcess::workspace(const std::string& key, const std::string& caller) const {
  // The runner's opaque name (workspace/workspace_names.hpp); "" if it cannot be computed.
  auto dir = workspace::workspace_dir_path(state_dir_ + "/workspaces", caller, key);
  return dir ? *dir : std::string();
}

std::string RunnerProcess::log() const { return read_file(log_path_); }

CommandResult RunnerProcess::client(const std::vector<std::string>& args, std::chrono::seconds timeout) const {
  // From the runner's own directory, which is in no Git checkout: `run` does not sync one.
  return client_in(dir_, args, {}, timeout);
}

CommandResult RunnerProcess::client_in(const std::string& cwd, const std::vector<std::string>& args,
                                       const std::vector<std::string>& env_add, std::chrono::seconds timeout) const {
  std::vector<std::string> argv{MOTOR_CLIENT_BIN, "--socket", socket_};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, env_add, timeout, cwd);
}

RawClient::RawClient(const std::string& socket_path) {
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    close(fd_);
    fd_ = -1;
  }
}

std::unique_ptr<RawClient> RawClient::via_program(const std::vector<std::string>& argv, const std::vector<std::string>& env_add) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return nullptr;
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::vector<std::string> env_store(env_add);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(sv[1], 0);
    dup2(sv[1], 1);
    for (auto& e : env_store) putenv(e.data());
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  close(sv[1]);
  std::unique_ptr<RawClient> c(new RawClient());
  c->fd_ = sv[0];
  c->bridge_pid_ = pid;
  return c;
}

std::unique_ptr<RawClient> RawClient::via_bridge(const std::string& socket_path, const std::string& caller) {
  return via_program({MOTOR_RUNNER_BIN, "connect", "--caller", caller, "--socket", socket_path});
}


std::unique_ptr<RawClient> RawClient::as_account(const std::string& socket_path, uid_t uid, gid_t gid) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return nullptr;
  const pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    if (setgroups(0, nullptr) < 0 || setgid(gid) < 0 || setuid(uid) < 0) _exit(2);
    RawClient c(socket_path);
    if (!c.connected()) _exit(3);
    FdMessage m;
    m.carry(c.fd_);
    _exit(sendmsg(sv[1], &m.msg, 0) == 1 ? 0 : 4);
  }
  close(sv[1]);
  FdMessage m;
  const ssize_t n = recvmsg(sv[0], &m.msg, MSG_CMSG_CLOEXEC);
  close(sv[0]);
  waitpid(pid, nullptr, 0);
  const int fd = m.carried(n);
  if (fd < 0) return nullptr;
  std::unique_ptr<RawClient> c(new RawClient());
  c->fd_ = fd;
  return c;
}

RawClient::~RawClient() {
  if (fd_ >= 0) close(fd_);
  if (bridge_pid_ > 0) {
    // The bridge exits once the runner closes its side; do not wait on a stuck one for ever.
    for (int i = 0; i < 200 && waitpid(bridge_pid_, nullptr, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (waitpid(bridge_pid_, nullptr, WNOHANG) == 0) {
      kill(bridge_pid_, SIGKILL);
      waitpid(bridge_pid_, nullptr, 0);
    }
  }
}

bool RawClient::send_bytes(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool RawClient::send_frame(const std::string& json) { return send_bytes(protocol::encode_frame(json)); }

std::vector<std::string> read_until_terminal(RawClient& c, std::chrono::milliseconds timeout) {
  std::vector<std::string> frames;
  for (std::optional<std::string> f; (f = c.read_frame(timeout));) {
    frames.push_back(*f);
    if (json_field(*f, "/type") == "terminal" || json_field(*f, "/error/code")[0] != '<') break;
  }
  return frames;
}

std::optional<std::string> RawClient::read_frame(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (buffer_.size() >= 4) {
      const auto* h = reinterpret_cast<const unsigned char*>(buffer_.data());
      const size_t len = (size_t{h[0]} << 24) | (size_t{h[1]} << 16) | (size_t{h[2]} << 8) | h[3];
      if (buffer_.size() >= 4 + len) {
        std::string payload = buffer_.substr(4, len);
        buffer_.erase(0, 4 + len);
        return payload;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char buf[65536];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

bool RawClient::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;
  }
}

std::string runner_status(const RunnerProcess& r, bool reset_stall) {
  RawClient c(r.socket());
  c.send_frame(fmt::format(R"({{"id":1,"method":"runner.status","params":{{"reset_stall":{}}}}})", reset_stall));
  return c.read_frame().value_or("");
}

std::string call_method(RawClient& c, int64_t id, const std::string& method, const std::string& params) {
  if (!c.send_frame(fmt::format(R"({{"id":{},"method":"{}","params":{}}})", id, method, params))) return "<not sent>";
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(60000));
    if (!f) return "<no reply>";
    if (json_field(*f, "/id") == std::to_string(id) &&
        (json_field(*f, "/result") != "<missing>" || json_field(*f, "/error") != "<missing>")) {
      return *f;
    }
  }
}

std::string json_quote(const std::string& text) {
  std::string out;
  protocol::append_json_string(out, text);
  return out;
}

std::string json_field(const std::string& json, const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json).get(root)) return "<invalid json>";
  simdjson::dom::element e;
  if (root.at_pointer(path).get(e)) return "<missing>";
  std::string_view s;
  if (!e.get_string().get(s)) return std::string(s);
  return simdjson::minify(e);
}

}  // namespace motor::test

namespace motor::test {

std::string git_init_script(const std::string& name) {
  return fmt::format("git init -q {0} && cd {0} && git config user.name t && git config user.email t@t", name);
}

std::string test_guest_dir() {
  static const std::string dir = [] {
    auto r = run_program({std::string(MOTOR_SOURCE_DIR) + "/scripts/build-test-guest"}, {}, std::chrono::seconds(600));
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return r.exit_code == 0 ? out : std::string();
  }();
  return dir;
}

}  // namespace motor::test
