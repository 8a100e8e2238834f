#include "gate/gate_run.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "gate/attacks.hpp"
#include "gate/gate_client.hpp"
#include "gate/host_checks.hpp"
#include "motor/test_switches.hpp"
#include "motor/version.hpp"
#include "protocol/json_writer.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::gate {
namespace {

struct AttackRecord {
  std::string id, control, description, needs;
  Verdict verdict;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

void on_signal(int) { set_interrupted(); }

// Removes a tree without following symlinks or crossing mounts (the gate's workspace holds
// symlinks it planted to host paths).
int remove_entry(const char* path, const struct stat*, int type, FTW*) {
  if (type == FTW_DP || type == FTW_D) rmdir(path);
  else unlink(path);
  return 0;
}
void remove_tree(const std::string& path) {
  if (path.empty() || path == "/") return;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    unlink(path.c_str());
    return;
  }
  nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
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
    std::string cmdline = read_file(fmt::format("/proc/{}/cmdline", pid));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

// The operator's config text with what must differ for a gate run: its own cgroup parent (never
// the production runner's jobs), no metrics file, kill on SIGTERM.
Expected<std::string> derived_config(const GateOptions& options, const std::string& cgroup_parent) {
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
  std::istringstream in(text);
  std::string out, line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] != '#') {
      const auto end = line.find_first_of(" \t=", first);
      const std::string key = line.substr(first, end == std::string::npos ? std::string::npos : end - first);
      if (key == "cgroup_parent" || key == "metrics_file" || key == "shutdown") continue;
    }
    out += line + "\n";
  }
  out += fmt::format("# motor-runner gate: its own cgroup parent, no metrics, kill on SIGTERM\n"
                     "cgroup_parent = {}\nmetrics_file = \"\"\nshutdown = kill\n",
                     cgroup_parent);
  if (auto parsed = config::parse_config(out, "gate config"); !parsed) return parsed.error();
  return out;
}

bool socket_answers(const std::string& path) {
  auto s = GateSession::connect_socket(path);
  return s.ok();
}

// Everything the gate starts or makes, undone in the destructor, also on failure or interrupt.
struct GateRun {
  std::string tmp_dir, state_dir, socket, log_path, config_path, cgroup_parent;
  bool temp_state = true;
  pid_t runner = -1;
  pid_t marker_proc = -1;
  int listener = -1;
  std::vector<std::string> remove_after;   // host paths the gate made outside its temp dir
  std::vector<std::string> markers;
  std::vector<std::string> cgroup_mounts;
  std::vector<std::string> cleanup_notes;

  ~GateRun() { cleanup(); }

  void stop_runner() {
    if (runner <= 0) return;
    kill(runner, SIGTERM);
    int status = 0;
    for (int i = 0; i < 3000; ++i) {
      if (waitpid(runner, &status, WNOHANG) == runner) {
        runner = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    cleanup_notes.push_back("the runner did not stop within 30 s of SIGTERM; killed");
    kill(runner, SIGKILL);
    waitpid(runner, nullptr, 0);
    runner = -1;
  }

  void cleanup() {
    if (marker_proc > 0) {
      kill(marker_proc, SIGKILL);
      waitpid(marker_proc, nullptr, 0);
      marker_proc = -1;
    }
    if (listener >= 0) close(listener);
    listener = -1;
    stop_runner();
    for (const auto& m : markers) {
      for (pid_t p : processes_with(m)) {
        cleanup_notes.push_back(fmt::format("killed leftover process {} ({})", p, m));
        kill(p, SIGKILL);
      }
    }
    markers.clear();
    // The gate runner's cgroups: whatever a failed run left, then the parent itself.
    for (const auto& mnt : cgroup_mounts) {
      const std::string parent = mnt + "/" + cgroup_parent;
      if (DIR* d = opendir(parent.c_str())) {
        while (dirent* e = readdir(d)) {
          if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
          const std::string cg = parent + "/" + e->d_name;
          cleanup_notes.push_back("removed leftover cgroup " + cg);
          (void)sandbox::reap_now(sandbox::remains_of_dirs({cg}, cg), 3000);
        }
        closedir(d);
        if (rmdir(parent.c_str()) < 0 && errno != ENOENT) {
          cleanup_notes.push_back(fmt::format("could not remove {}: {}", parent, std::strerror(errno)));
        }
      }
    }
    cgroup_mounts.clear();
    for (const auto& p : remove_after) remove_tree(p);
    remove_after.clear();
    if (!tmp_dir.empty()) remove_tree(tmp_dir);
    tmp_dir.clear();
  }
};

Status start_runner(GateRun& g, const std::string& exe) {
  // A test build's weakened controls (include/motor/test_switches.hpp) go to its runner: the
  // runner applies them, the gate only says so. motor-runner has none.
  std::vector<std::string> args = {"motor-runner", "serve", "--config", g.config_path, "--state-dir", g.state_dir,
                                   "--socket", g.socket};
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
    const int log = ::open(g.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log < 0 || null < 0) _exit(71);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    // Never speak to the service manager as if this were the production runner.
    unsetenv("NOTIFY_SOCKET");
    unsetenv("JOURNAL_STREAM");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  g.runner = pid;
  for (int i = 0; i < 1500 && !interrupted(); ++i) {
    if (socket_answers(g.socket)) return {};
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      g.runner = -1;
      return make_error("runner", fmt::format("the runner exited ({}) before it listened: {}",
                                              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                                              read_file(g.log_path)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return make_error("runner", "the runner did not listen on " + g.socket + " within 30 s: " + read_file(g.log_path));
}

// A TCP listener on the host's 127.0.0.1, checked reachable from the host.
Expected<std::pair<int, int>> open_listener() {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return make_error("io", "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || listen(s, 16) < 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) < 0) {
    close(s);
    return make_error("io", std::string("listener: ") + std::strerror(errno));
  }
  const int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool reachable = c >= 0 && connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (c >= 0) close(c);
  for (int i = 0; i < 100; ++i) {
    const int acc = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    if (acc >= 0) {
      close(acc);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!reachable) {
    close(s);
    return make_error("io", "the host cannot reach its own 127.0.0.1 listener");
  }
  return std::pair<int, int>{s, ntohs(a.sin_port)};
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

// ---- report ----------------------------------------------------------------------------------

struct Summary {
  int stopped = 0, got_through = 0, skipped = 0, skipped_not_host = 0, inconclusive = 0, checks_failed = 0;
  size_t attacks_run = 0, attacks_known = 0;
  std::vector<std::string> weakened;  // test build only: controls its runner ran without
  std::string line() const {
    std::string s = fmt::format("{} stopped, {} got through, {} skipped", stopped, got_through, skipped);
    if (inconclusive) s += fmt::format(", {} inconclusive", inconclusive);
    if (checks_failed) s += fmt::format("; {} host check{} failed", checks_failed, checks_failed == 1 ? "" : "s");
    if (attacks_run < attacks_known) s += fmt::format(" ({} of {} attacks run: --attack)", attacks_run, attacks_known);
    if (!weakened.empty()) s += fmt::format("; TEST BUILD, WEAKENED: {}", fmt::join(weakened, ", "));
    return s;
  }
  // A runner with a weakened control never passes, whatever the attacks saw.
  bool passed() const {
    return got_through == 0 && inconclusive == 0 && skipped_not_host == 0 && checks_failed == 0 && weakened.empty();
  }
};

std::string weakened_banner(const std::vector<std::string>& weakened) {
  return fmt::format("TEST BUILD: this runner ran with weakened control{} {} (--test-weaken): not a real gate result, "
                     "never use this build for jobs",
                     weakened.size() == 1 ? "" : "s", fmt::join(weakened, ", "));
}

void print_table(const std::vector<HostCheck>& checks, const std::vector<AttackRecord>& attacks, const Summary& sum,
                 const std::string& config_origin, const std::string& fatal, const std::vector<std::string>& notes) {
  fmt::print("motor-runner gate {} (config: {})\n", kVersion, config_origin);
  if (!sum.weakened.empty()) fmt::print("\n!!! {} !!!\n", weakened_banner(sum.weakened));
  fmt::print("\nHost checks\n");
  size_t w = 0;
  for (const auto& c : checks) w = std::max(w, c.name.size());
  for (const auto& c : checks) {
    fmt::print("  {:<5} {:<{}}  {}\n", check_status_name(c.status), c.name, w, c.detail);
    if (c.status == CheckStatus::kFail && !c.fix.empty()) fmt::print("  {:<5} {:<{}}  fix: {}\n", "", "", w, c.fix);
  }
  if (!fatal.empty()) fmt::print("\nThe gate could not run its attacks: {}\n", fatal);
  if (!attacks.empty()) {
    size_t wc = 7, wa = 6, wr = 6;
    for (const auto& a : attacks) {
      wc = std::max(wc, a.control.size());
      wa = std::max(wa, a.id.size());
      std::string r = result_name(a.verdict.result);
      wr = std::max(wr, r.size() + (a.verdict.result == Result::kSkipped ? 1 : 0));
    }
    wc = std::min<size_t>(wc, 56);
    fmt::print("\nAttacks (each a real job through the runner)\n");
    fmt::print("  {:<{}}  {:<{}}  {:<{}}  {}\n", "CONTROL", wc, "ATTACK", wa, "RESULT", wr, "EVIDENCE");
    for (const auto& a : attacks) {
      std::string control = a.control.size() > wc ? a.control.substr(0, wc - 3) + "..." : a.control;
      std::string result = result_name(a.verdict.result);
      std::string evidence = a.verdict.evidence;
      if (a.verdict.result == Result::kSkipped) result += ":";
      fmt::print("  {:<{}}  {:<{}}  {:<{}}  {}\n", control, wc, a.id, wa, result, wr, evidence);
    }
  }
  for (const auto& n : notes) fmt::print("cleanup: {}\n", n);
  if (!sum.weakened.empty()) fmt::print("\n!!! {} !!!\n", weakened_banner(sum.weakened));
  fmt::print("\n{}\n", sum.line());
}

void print_json(const std::vector<HostCheck>& checks, const std::vector<AttackRecord>& attacks, const Summary& sum,
                const std::string& config_origin, const std::string& fatal, const std::vector<std::string>& notes) {
  protocol::JsonWriter w;
  w.begin_object().field("gate", "motor-runner").field("version", kVersion).field("protocol", kProtocolVersion);
  w.field("config", config_origin);
  w.key("weakened_controls").begin_array();
  for (const auto& c : sum.weakened) w.string(c);
  w.end_array();
  if (!sum.weakened.empty()) w.field("warning", weakened_banner(sum.weakened));
  w.key("host_checks").begin_array();
  for (const auto& c : checks) {
    w.begin_object().field("name", c.name).field("status", check_status_name(c.status)).field("detail", c.detail);
    if (c.status == CheckStatus::kFail) w.field("fix", c.fix);
    w.end_object();
  }
  w.end_array();
  if (!fatal.empty()) w.field("error", fatal);
  w.key("attacks").begin_array();
  for (const auto& a : attacks) {
    w.begin_object().field("id", a.id).field("control", a.control).field("attack", a.description);
    w.field("result", result_json_name(a.verdict.result)).field("evidence", a.verdict.evidence);
    if (!a.needs.empty()) w.field("needs", a.needs);
    if (a.verdict.result == Result::kSkipped) w.field("host_level", a.verdict.host_level);
    w.end_object();
  }
  w.end_array();
  w.key("cleanup").begin_array();
  for (const auto& n : notes) w.string(n);
  w.end_array();
  w.key("summary").begin_object();
  w.field("stopped", sum.stopped).field("got_through", sum.got_through).field("skipped", sum.skipped);
  w.field("skipped_without_host_reason", sum.skipped_not_host).field("inconclusive", sum.inconclusive);
  w.field("host_checks_failed", sum.checks_failed).field("attacks_run", static_cast<int64_t>(sum.attacks_run));
  w.field("line", sum.line()).field("passed", sum.passed());
  w.end_object().end_object();
  fmt::print("{}\n", w.str());
}

}  // namespace

std::vector<std::string> attack_ids() {
  std::vector<std::string> ids;
  for (const auto& a : attack_catalogue()) ids.push_back(a.id);
  return ids;
}

int run_gate(const config::Config& config, const GateOptions& options) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  signal(SIGPIPE, SIG_IGN);

  const std::string config_origin = options.config_path ? *options.config_path : "embedded default config";
  std::vector<HostCheck> checks;
  std::vector<AttackRecord> records;
  std::string fatal;
  std::vector<std::string> notes;
  int code = 0;
  {
    GateRun g;
    HostFacts facts;
    if (geteuid() != 0) {
      fatal = "the gate runs as root: it starts a runner (as `serve` does), plants root-owned files and reads the host's "
              "process table";
    } else {
      checks = run_host_checks(config, facts);
    }

    const std::string exe = self_exe();
    // The gate runner's paths.
    if (fatal.empty()) {
      char tmpl[] = "/tmp/motor-gate-XXXXXX";
      if (!mkdtemp(tmpl)) fatal = std::string("mkdtemp: ") + std::strerror(errno);
      else {
        g.tmp_dir = tmpl;
        chmod(g.tmp_dir.c_str(), 0711);  // jobs reach their workspace below it
      }
    }
    if (fatal.empty()) {
      g.temp_state = !options.state_dir;
      g.state_dir = options.state_dir ? *options.state_dir : g.tmp_dir + "/state";
      g.socket = g.tmp_dir + "/motor.sock";
      g.log_path = g.tmp_dir + "/runner.log";
      g.config_path = g.tmp_dir + "/runner.conf";
      g.cgroup_parent = fmt::format("{}-gate-{}", config.cgroup_parent, getpid());
      g.cgroup_mounts = facts.cgroup_mounts;
      if (g.state_dir.empty() || g.state_dir[0] != '/') fatal = "--state-dir must be an absolute path";
      else if (options.state_dir && *options.state_dir == config.state_dir && socket_answers(config.socket_path)) {
        fatal = "a runner is serving " + config.state_dir + " (it answers on " + config.socket_path +
                "); give the gate another --state-dir, or none for a temporary one";
      }
    }
    if (fatal.empty()) {
      auto text = derived_config(options, g.cgroup_parent);
      if (!text) fatal = text.error().message;
      else std::ofstream(g.config_path) << *text;
    }
    if (fatal.empty()) {
      if (auto s = start_runner(g, exe); !s) fatal = s.error().message;
    }
    std::unique_ptr<GateSession> main;
    if (fatal.empty()) {
      auto s = GateSession::connect_socket(g.socket);
      if (!s) fatal = s.error().message;
      else main = std::move(*s);
    }
    if (fatal.empty()) {
      auto hello = main->call("runner.hello", "{}", 10'000);
      if (!hello) {
        checks.push_back({"runner answers", CheckStatus::kFail, hello.error().message, "see the runner log"});
      } else if (hello->find(fmt::format("\"version\":\"{}\"", kVersion)) == std::string::npos) {
        checks.push_back({"runner answers", CheckStatus::kFail, "version differs: " + *hello,
                          "install one motor-runner build; the gate and the runner are the same executable"});
      } else {
        checks.push_back({"runner answers", CheckStatus::kOk, "runner.hello: " + *hello, ""});
      }
      checks.push_back(check_state_dir("gate runner's state directory", g.state_dir));
      checks.push_back(check_socket("gate runner's socket", g.socket, config.socket_group));
    }

    // The attacks' environment.
    AttackEnv env;
    config::Config effective = config;
    effective.state_dir = g.state_dir;
    if (fatal.empty()) {
      env.config = &config;
      env.facts = facts;
      env.self_exe = exe;
      env.socket_path = g.socket;
      env.state_dir = g.state_dir;
      env.gate_dir = g.tmp_dir;
      env.cgroup_parent = g.cgroup_parent;
      env.runner_pid = g.runner;
      env.workspace_key = fmt::format("gate-{}", getpid());
      env.workspace_root = effective.effective_workspace_root();
      // The runner's opaque directory names (workspace/workspace_names.hpp) for the gate's caller
      // ("root") and the other caller.
      auto own = workspace::workspace_dir_path(env.workspace_root, "root", env.workspace_key);
      auto other = workspace::workspace_dir_path(env.workspace_root, env.other_caller, env.workspace_key);
      if (!own || !other) fatal = (!own ? own.error() : other.error()).message;
      env.workspace = own ? *own : "";
      env.other_workspace = other ? *other : "";
      env.outside_dir = env.workspace + "-outside";
      struct stat st {};
      if (fatal.empty() && (!g.temp_state || !config.workspace_root.empty())) {
        // Outside the gate's temp dir: remove exactly what the gate made.
        if (stat(env.workspace.c_str(), &st) == 0) fatal = env.workspace + " already exists";
        g.remove_after.push_back(env.workspace);
        g.remove_after.push_back(env.outside_dir);
        g.remove_after.push_back(env.other_workspace);
        for (const std::string caller : {"root", env.other_caller.c_str()})
          g.remove_after.push_back(env.workspace_root + "/.keys/" + caller + "/" + env.workspace_key);
      }
      if (passwd* pw = getpwnam(config.job_user.c_str())) env.job_uid = pw->pw_uid;
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      env.host_hostname = host;
      std::random_device rd;
      auto counter = std::make_shared<int>(0);
      const unsigned salt = rd() % 1000000;
      env.new_marker = [&g, counter, salt]() {
        std::string m = fmt::format("{}{:06}{:03}", getpid() % 100000, salt, (*counter)++ % 1000);
        g.markers.push_back(m);
        return m;
      };
      env.processes_with = processes_with;
      const std::string sock = g.socket;
      env.run_job = [&main, sock](const JobRequest& rq, int timeout_ms, const std::function<void(const std::string&)>& f) {
        JobResult r = main->run(rq, timeout_ms, f);
        if (!r.error.empty() && !interrupted()) {
          if (auto s = GateSession::connect_socket(sock)) main = std::move(*s);
        }
        return r;
      };
      env.run_job_as_other = [exe, sock, &env](const JobRequest& rq, int timeout_ms) {
        auto s = GateSession::via_bridge(exe, sock, env.other_caller);
        if (!s) {
          JobResult r;
          r.error = s.error().message;
          return r;
        }
        return (*s)->run(rq, timeout_ms);
      };
      env.call = [sock](std::string_view method, std::string_view params) -> Expected<std::string> {
        auto s = GateSession::connect_socket(sock);
        if (!s) return s.error();
        return (*s)->call(method, params, 10'000);
      };
    }
    std::string warmup_failure;
    if (fatal.empty()) {
      env.host_marker = env.new_marker();
      g.marker_proc = start_marker_process(env.host_marker);
      env.host_marker_pid = g.marker_proc;
      auto l = open_listener();
      if (!l) fatal = l.error().message;
      else {
        g.listener = env.listener_fd = l->first;
        env.listener_port = l->second;
      }
    }
    if (fatal.empty()) {
      // The first job creates the workspace (the runner makes it, owned by the job account).
      JobRequest first;
      first.workspace_key = env.workspace_key;
      first.argv = {"/bin/true"};
      auto r = env.run_job(first, 60'000, {});
      if (!r.exited(0)) warmup_failure = "a first job (/bin/true) did not succeed: " + r.outcome_text() + " " + r.err;
      struct stat st {};
      if (warmup_failure.empty() && stat(env.workspace.c_str(), &st) != 0) {
        warmup_failure = "the runner did not create the workspace at " + env.workspace;
      }
      if (warmup_failure.empty()) {
        if (mkdir(env.outside_dir.c_str(), 0777) != 0 || chmod(env.outside_dir.c_str(), 0777) != 0) {
          warmup_failure = "cannot create " + env.outside_dir;
        }
      }
    }

    if (fatal.empty()) {
      for (auto& attack : attack_catalogue()) {
        if (!options.attacks.empty() &&
            std::find(options.attacks.begin(), options.attacks.end(), attack.id) == options.attacks.end()) {
          continue;
        }
        AttackRecord rec{attack.id, attack.control, attack.description, attack.needs, {}};
        int status = 0;
        if (interrupted()) {
          rec.verdict = {Result::kInconclusive, "interrupted", false};
        } else if (g.runner > 0 && waitpid(g.runner, &status, WNOHANG) == g.runner) {
          g.runner = -1;
          rec.verdict = {Result::kInconclusive, "the runner died: " + read_file(g.log_path).substr(0, 2000), false};
        } else if (g.runner <= 0) {
          rec.verdict = {Result::kInconclusive, "the runner is gone", false};
        } else if (auto skip = attack.skip ? attack.skip(env) : std::nullopt) {
          rec.verdict = *skip;
        } else if (!warmup_failure.empty()) {
          rec.verdict = {Result::kInconclusive, warmup_failure, false};
        } else {
          rec.verdict = attack.run(env);
        }
        records.push_back(std::move(rec));
      }
    }
    main.reset();
    g.cleanup();
    notes = g.cleanup_notes;
  }

  Summary sum;
  sum.weakened = weakened_control_names();
  sum.attacks_run = records.size();
  sum.attacks_known = options.attacks.empty() ? records.size() : attack_ids().size();
  for (const auto& c : checks) sum.checks_failed += c.status == CheckStatus::kFail;
  for (const auto& r : records) {
    switch (r.verdict.result) {
      case Result::kStopped: ++sum.stopped; break;
      case Result::kGotThrough: ++sum.got_through; break;
      case Result::kSkipped:
        ++sum.skipped;
        sum.skipped_not_host += !r.verdict.host_level;
        break;
      case Result::kInconclusive: ++sum.inconclusive; break;
    }
  }
  if (options.json) print_json(checks, records, sum, config_origin, fatal, notes);
  else print_table(checks, records, sum, config_origin, fatal, notes);
  code = !fatal.empty() ? 2 : sum.passed() ? 0 : 1;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return code;
}

}  // namespace motor::gate
