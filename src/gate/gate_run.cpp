#include "gate/gate_run.hpp"

#include <dirent.h>
#include <ftw.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gate/attack_steps.hpp"
#include "gate/gate_report.hpp"
#include "gate/gate_setup.hpp"
#include "gate/host_checks.hpp"
#include "gate/runner_session.hpp"
#include "motor/test_switches.hpp"
#include "motor/version.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::gate {
namespace {

void on_signal(int) { set_interrupted(); }

// SIGINT and SIGTERM end every wait of the gate (it then cleans up); restored when it returns.
class InterruptHandlers {
 public:
  InterruptHandlers() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    signal(SIGPIPE, SIG_IGN);
  }
  ~InterruptHandlers() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

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

// Kills what is left in one job cgroup and removes it.
void kill_and_remove_cgroup(const std::string& cg) {
  (void)sandbox::reap_now(sandbox::remains_of_dirs({cg}, cg), 3000);
}

// Everything the gate starts or makes, undone by cleanup() (and the destructor), also on failure
// or interrupt.
struct GateRun {
  std::string tmp_dir, cgroup_parent;
  RunnerPaths paths;
  bool temp_state = true;
  pid_t runner = -1;
  pid_t marker_proc = -1;
  int listener = -1;
  std::vector<std::string> remove_after;   // host paths the gate made outside its temp dir
  std::vector<std::string> markers;
  std::vector<std::string> cgroup_mounts;
  std::vector<std::string> cleanup_notes;
  std::shared_ptr<JobTransport> transport;  // stopped before the runner

  GateRun() = default;
  GateRun(const GateRun&) = delete;
  GateRun& operator=(const GateRun&) = delete;
  ~GateRun() { cleanup(); }

  void stop_runner();
  // The gate runner's cgroups: whatever a failed run left, then the parent itself.
  void remove_cgroups();
  void cleanup();
};

void GateRun::stop_runner() {
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

void GateRun::remove_cgroups() {
  for (const auto& mnt : cgroup_mounts) {
    const std::string parent = mnt + "/" + cgroup_parent;
    DIR* d = opendir(parent.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
      const std::string cg = parent + "/" + e->d_name;
      cleanup_notes.push_back("removed leftover cgroup " + cg);
      kill_and_remove_cgroup(cg);
    }
    closedir(d);
    if (rmdir(parent.c_str()) < 0 && errno != ENOENT) {
      cleanup_notes.push_back(fmt::format("could not remove {}: {}", parent, std::strerror(errno)));
    }
  }
  cgroup_mounts.clear();
}

void GateRun::cleanup() {
  if (marker_proc > 0) {
    kill(marker_proc, SIGKILL);
    waitpid(marker_proc, nullptr, 0);
    marker_proc = -1;
  }
  if (listener >= 0) close(listener);
  listener = -1;
  if (transport) transport->stop();
  transport.reset();
  stop_runner();
  for (const auto& m : markers) {
    for (pid_t p : processes_with(m)) {
      cleanup_notes.push_back(fmt::format("killed leftover process {} ({})", p, m));
      kill(p, SIGKILL);
    }
  }
  markers.clear();
  remove_cgroups();
  for (const auto& p : remove_after) remove_tree(p);
  remove_after.clear();
  if (!tmp_dir.empty()) remove_tree(tmp_dir);
  tmp_dir.clear();
}

// What one gate run found, for the report.
struct Findings {
  std::vector<HostCheck> checks;
  std::vector<AttackRecord> records;
  std::string fatal;  // the attacks could not run at all
  std::vector<std::string> notes;
};

// The gate runner's paths in a fresh temporary directory (its state there too, unless
// --state-dir); "" or why not.
std::string make_paths(GateRun& g, const config::Config& config, const GateOptions& options, const HostFacts& facts) {
  char tmpl[] = "/tmp/motor-gate-XXXXXX";
  if (!mkdtemp(tmpl)) return std::string("mkdtemp: ") + std::strerror(errno);
  g.tmp_dir = tmpl;
  chmod(g.tmp_dir.c_str(), 0711);  // jobs reach their workspace below it
  g.temp_state = !options.state_dir;
  g.paths = {g.tmp_dir + "/runner.conf", options.state_dir ? *options.state_dir : g.tmp_dir + "/state",
             g.tmp_dir + "/motor.sock", g.tmp_dir + "/runner.log"};
  g.cgroup_parent = fmt::format("{}-gate-{}", config.cgroup_parent, getpid());
  g.cgroup_mounts = facts.cgroup_mounts;
  if (g.paths.state_dir.empty() || g.paths.state_dir[0] != '/') return "--state-dir must be an absolute path";
  if (options.state_dir && *options.state_dir == config.state_dir && socket_answers(config.socket_path)) {
    return "a runner is serving " + config.state_dir + " (it answers on " + config.socket_path +
           "); give the gate another --state-dir, or none for a temporary one";
  }
  return "";
}

// The gate runner on its derived config (with what the transport needs); `main` its first
// session. "" or why not.
std::string start_gate_runner(GateRun& g, const GateOptions& options, const std::string& exe,
                              std::unique_ptr<RunnerSession>& main) {
  std::string extra;
  if (options.transport) {
    g.transport = options.transport;
    auto lines = g.transport->prepare(g.tmp_dir);
    if (!lines) return g.transport->name() + ": " + lines.error().message;
    extra = std::move(*lines);
  }
  auto text = derived_config(options, g.cgroup_parent, extra);
  if (!text) return text.error().message;
  std::ofstream(g.paths.config) << *text;
  if (auto s = start_runner(g.paths, exe, g.runner); !s) return s.error().message;
  auto s = RunnerSession::connect_socket(g.paths.socket);
  if (!s) return s.error().message;
  main = std::move(*s);
  return "";
}

// The started runner says the gate's version, and made its state directory and socket right.
void check_gate_runner(RunnerSession& main, const GateRun& g, const config::Config& config,
                       std::vector<HostCheck>& checks) {
  auto hello = main.call("runner.hello", "{}", 10'000);
  if (!hello) {
    checks.push_back({"runner answers", CheckStatus::kFail, hello.error().message, "see the runner log"});
  } else if (hello->find(fmt::format("\"version\":\"{}\"", kVersion)) == std::string::npos) {
    checks.push_back({"runner answers", CheckStatus::kFail, "version differs: " + *hello,
                      "install one motor-runner build; the gate and the runner are the same executable"});
  } else {
    checks.push_back({"runner answers", CheckStatus::kOk, "runner.hello: " + *hello, ""});
  }
  checks.push_back(check_state_dir("gate runner's state directory", g.paths.state_dir));
  checks.push_back(check_socket("gate runner's socket", g.paths.socket, config.socket_group));
}

// The gate's workspaces (the runner's opaque names for the gate's caller "root" and the other
// caller) and, outside the gate's temp dir, exactly what the gate will make there. "" or why not.
std::string place_workspaces(AttackEnv& env, GateRun& g, const config::Config& config) {
  config::Config effective = config;
  effective.state_dir = g.paths.state_dir;
  env.workspace_key = fmt::format("gate-{}", getpid());
  env.workspace_root = effective.effective_workspace_root();
  auto own = workspace::workspace_dir_path(env.workspace_root, "root", env.workspace_key);
  auto other = workspace::workspace_dir_path(env.workspace_root, env.other_caller, env.workspace_key);
  if (!own || !other) return (!own ? own.error() : other.error()).message;
  env.workspace = *own;
  env.other_workspace = *other;
  env.outside_dir = env.workspace + "-outside";
  if (g.temp_state && config.workspace_root.empty()) return "";
  struct stat st {};
  if (stat(env.workspace.c_str(), &st) == 0) return env.workspace + " already exists";
  g.remove_after.push_back(env.workspace);
  g.remove_after.push_back(env.outside_dir);
  g.remove_after.push_back(env.other_workspace);
  for (const std::string caller : {"root", env.other_caller.c_str()})
    g.remove_after.push_back(env.workspace_root + "/.keys/" + caller + "/" + env.workspace_key);
  return "";
}

// How the attacks reach the runner: jobs on the main session (reconnected after a transport
// error), as the other caller through a bridge, and single requests on a fresh session.
void connect_env(AttackEnv& env, std::unique_ptr<RunnerSession>& main, const std::string& exe) {
  const std::string sock = env.socket_path;
  env.run_job = [&main, sock](const JobRequest& rq, int timeout_ms, const std::function<void(const std::string&)>& f) {
    JobResult r = main->run(rq, timeout_ms, f);
    if (!r.error.empty() && !interrupted()) {
      // A runner that stops answering is said to have: the next attack would only report a
      // broken pipe on the old connection.
      if (auto s = RunnerSession::connect_socket(sock)) main = std::move(*s);
      else r.error += "; connecting again failed: " + s.error().message;
    }
    return r;
  };
  env.run_job_as_other = [exe, sock, caller = env.other_caller](const JobRequest& rq, int timeout_ms) {
    auto s = RunnerSession::via_bridge(exe, sock, caller);
    if (!s) {
      JobResult r;
      r.error = s.error().message;
      return r;
    }
    return (*s)->run(rq, timeout_ms);
  };
  env.call = [sock](std::string_view method, std::string_view params) -> Expected<std::string> {
    auto s = RunnerSession::connect_socket(sock);
    if (!s) return s.error();
    return (*s)->call(method, params, 10'000);
  };
}

// The attacks' jobs through the transport instead; their workspace is the one it lays out. ""
// or why not.
std::string connect_transport(AttackEnv& env, JobTransport& transport) {
  if (auto s = transport.start(env.socket_path); !s) return transport.name() + ": " + s.error().message;
  auto dir = transport.workspace_dir(env.workspace_key);
  if (!dir) return transport.name() + ": " + dir.error().message;
  env.workspace = *dir;
  env.outside_dir = env.workspace + "-outside";
  env.run_job = [&transport](const JobRequest& rq, int timeout_ms, const std::function<void(const std::string&)>& f) {
    return transport.run(rq, timeout_ms, f);
  };
  return "";
}

// The attacks' environment. "" or why it cannot be made.
std::string make_env(AttackEnv& env, GateRun& g, const config::Config& config, const HostFacts& facts,
                     const std::string& exe) {
  env.config = &config;
  env.facts = facts;
  env.self_exe = exe;
  env.socket_path = g.paths.socket;
  env.state_dir = g.paths.state_dir;
  env.gate_dir = g.tmp_dir;
  env.cgroup_parent = g.cgroup_parent;
  env.runner_pid = g.runner;
  if (passwd* pw = getpwnam(config.job_user.c_str())) env.job_uid = pw->pw_uid;
  env.host_hostname = host_name();
  auto counter = std::make_shared<int>(0);
  const unsigned salt = std::random_device{}() % 1000000;
  env.new_marker = [&g, counter, salt]() {
    std::string m = fmt::format("{}{:06}{:03}", getpid() % 100000, salt, (*counter)++ % 1000);
    g.markers.push_back(m);
    return m;
  };
  env.processes_with = processes_with;
  return place_workspaces(env, g, config);
}

// The host's side of the attacks: the marker process and the 127.0.0.1 listener. "" or why not.
std::string start_host_side(AttackEnv& env, GateRun& g) {
  env.host_marker = env.new_marker();
  g.marker_proc = start_marker_process(env.host_marker);
  env.host_marker_pid = g.marker_proc;
  auto l = open_listener();
  if (!l) return l.error().message;
  g.listener = env.listener_fd = l->first;
  env.listener_port = l->second;
  return "";
}

// A first job creates the workspace (the runner makes it, owned by the job account); then the
// world-writable directory beside it. "" or why the attacks cannot be judged.
std::string warm_up(AttackEnv& env) {
  JobRequest first;
  first.workspace_key = env.workspace_key;
  first.argv = {"/bin/true"};
  auto r = env.run_job(first, 60'000, {});
  if (!r.exited(0)) return "a first job (/bin/true) did not succeed: " + r.outcome_text() + " " + r.err;
  struct stat st {};
  if (stat(env.workspace.c_str(), &st) != 0) return "the runner did not create the workspace at " + env.workspace;
  if (mkdir(env.outside_dir.c_str(), 0777) != 0 || chmod(env.outside_dir.c_str(), 0777) != 0) {
    return "cannot create " + env.outside_dir;
  }
  return "";
}

Verdict attack_verdict(const Attack& attack, AttackEnv& env, GateRun& g, const std::string& warmup_failure) {
  int status = 0;
  if (interrupted()) return {Result::kInconclusive, "interrupted", false};
  if (g.runner > 0 && waitpid(g.runner, &status, WNOHANG) == g.runner) {
    g.runner = -1;
    return {Result::kInconclusive, "the runner died: " + read_host(g.paths.log).substr(0, 2000), false};
  }
  if (g.runner <= 0) return {Result::kInconclusive, "the runner is gone", false};
  if (auto skip = skip_reason(attack, env)) return *skip;
  if (g.transport) {
    if (auto why = g.transport->not_applicable(attack.id)) {
      return {Result::kSkipped, "not applicable through " + g.transport->name() + ": " + *why, true};
    }
  }
  if (!warmup_failure.empty()) return {Result::kInconclusive, warmup_failure, false};
  return run_attack(attack, env);
}

std::vector<AttackRecord> run_attacks(AttackEnv& env, GateRun& g, const GateOptions& options,
                                      const std::string& warmup_failure) {
  std::vector<AttackRecord> records;
  for (const auto& attack : attack_catalogue()) {
    if (!options.attacks.empty() &&
        std::find(options.attacks.begin(), options.attacks.end(), attack.id) == options.attacks.end()) {
      continue;
    }
    records.push_back({std::string(attack.id), std::string(attack.control), std::string(attack.description),
                       needs_text(attack.needs), attack_verdict(attack, env, g, warmup_failure)});
  }
  return records;
}

// Host checks, the gate runner, the attacks; everything the gate made is cleaned up on return.
Findings run_checks_and_attacks(const config::Config& config, const GateOptions& options) {
  Findings f;
  GateRun g;
  HostFacts facts;
  if (geteuid() != 0) {
    f.fatal = "the gate runs as root: it starts a runner (as `serve` does), plants root-owned files and reads the host's "
              "process table";
    return f;
  }
  f.checks = run_host_checks(config, facts);
  const std::string exe = options.runner_exe.empty() ? self_exe() : options.runner_exe;
  std::unique_ptr<RunnerSession> main;
  AttackEnv env;
  f.fatal = make_paths(g, config, options, facts);
  if (f.fatal.empty()) f.fatal = start_gate_runner(g, options, exe, main);
  if (f.fatal.empty()) check_gate_runner(*main, g, config, f.checks);
  if (f.fatal.empty()) f.fatal = make_env(env, g, config, facts, exe);
  if (f.fatal.empty()) connect_env(env, main, exe);
  if (f.fatal.empty() && g.transport) f.fatal = connect_transport(env, *g.transport);
  if (f.fatal.empty()) f.fatal = start_host_side(env, g);
  if (f.fatal.empty()) f.records = run_attacks(env, g, options, warm_up(env));
  main.reset();
  g.cleanup();
  f.notes = g.cleanup_notes;
  return f;
}

}  // namespace

std::vector<std::string> attack_ids() {
  std::vector<std::string> ids;
  for (const auto& a : attack_catalogue()) ids.emplace_back(a.id);
  return ids;
}

Status add_attack_list(std::string_view list, std::vector<std::string>& attacks) {
  const auto known = attack_ids();
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) {
      std::string id(list.substr(start, comma - start));
      if (std::find(known.begin(), known.end(), id) == known.end()) {
        return make_error("usage", fmt::format("--attack: no attack {} (the attacks: {})", id, fmt::join(known, ",")));
      }
      attacks.push_back(std::move(id));
    }
    start = comma + 1;
  }
  return {};
}

int run_gate(const config::Config& config, const GateOptions& options) {
  InterruptHandlers handlers;
  const std::string config_origin = options.config_path ? *options.config_path : "embedded default config";
  const std::string jobs_through = options.transport ? options.transport->name() : "";
  const Findings f = run_checks_and_attacks(config, options);
  const Summary sum = summarize(f.checks, f.records, options.attacks.empty() ? f.records.size() : attack_ids().size(),
                                weakened_control_names());
  const Report report{f.checks, f.records, sum, config_origin, jobs_through, f.fatal, f.notes};
  if (options.json) print_json(report);
  else print_table(report);
  return !f.fatal.empty() ? 2 : sum.passed() ? 0 : 1;
}

}  // namespace motor::gate
