// Issue 3, "Tests: each control by its attack", run as real jobs through the real runner: a
// motor-runner process on a temporary state directory, the `motor` client, jobs as motor-job in
// the full sandbox (namespaces, empty root, caps dropped, no_new_privs, seccomp, cgroup limits).
//
// Each test names the control it attacks. Most attacks run the sandbox probe (the test binary
// itself, see sandbox_probe.cpp) copied into the job's workspace and started with
// MOTOR_SANDBOX_PROBE=1: it prints one "check = result" line per check, results being "OK", an
// errno name or a value. The rest use the toolchain the job sees (sh, python3, id, unshare,
// mount). Every test was run once with its control removed (docs/job-isolation.md, "Tests
// through the runner").
#include <arpa/inet.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

#include "integration/sandbox_probe.hpp"

namespace motor::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kProbeInJob = "/workspace/probe";

// Every test runs against a runner with a small pids limit (the fork bomb test) and an allow
// list that would forward the canaries' names if the secret-word rule did not stop them: the
// rule must hold "whatever the list says".
constexpr const char* kRunnerConfig = "pids_max = 64\nenv_allow = CC, LANG, TERM, GH_*, MY_*, SSH_*\n";

std::map<std::string, std::string> parse_probe(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return m;
}

// The last JSON line of a `motor run --json` transcript whose type is `terminal`.
std::string terminal_line(const std::string& transcript) {
  std::istringstream in(transcript);
  std::string line, terminal;
  while (std::getline(in, line)) {
    if (json_field(line, "/type") == "terminal") terminal = line;
  }
  return terminal;
}

std::vector<std::string> glob_dirs(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  const auto first = s.find_first_not_of(" \t");
  return first == std::string::npos ? "" : s.substr(first);
}

// Processes (other than `except`) in, or holding an fd of, one of `namespaces`.
std::vector<std::string> holders_of(const std::set<std::string>& namespaces) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    const std::string own = fs::read_symlink(e.path() / "ns/net", ec).string();
    std::set<std::string> held = netns_fds_of(static_cast<pid_t>(std::stol(name)));
    if (!ec) held.insert(own);
    for (const auto& ns : held)
      if (namespaces.count(ns)) out.push_back(name + " " + ns + " " + trim(run_program({"/bin/cat", "/proc/" + name + "/cmdline"}).out));
  }
  return out;
}

class RunnerIsolation : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "jobs through the runner need root (cgroups, the motor-job account)");
    MOTOR_REQUIRE(getpwnam_ok("motor-job"), "the motor-job account is missing (scripts/setup creates it)");
    // The runner's own environment must never reach a job: give it a canary to leak.
    runner_env_canary_ = "runner-env-canary-" + unique_marker();
    setenv("MOTOR_RUNNER_ENV_CANARY", runner_env_canary_.c_str(), 1);
    runner_ = std::make_unique<RunnerProcess>(kRunnerConfig);
    const bool started = runner_->start();
    unsetenv("MOTOR_RUNNER_ENV_CANARY");
    ASSERT_TRUE(started) << runner_->log();
  }

  void TearDown() override {
    // Nothing a test started may outlive it: processes by marker, then the runner (whose
    // harness kills what is left in the test's cgroups, removes them and the temp tree).
    for (const auto& m : markers_) {
      for (pid_t p : processes_with(m)) kill(p, SIGKILL);
    }
    listener_.reset();
    runner_.reset();
    for (const auto& m : markers_) EXPECT_TRUE(processes_with(m).empty()) << "left behind: " << m;
  }

  static bool getpwnam_ok(const char* name) {
    return run_program({"/usr/bin/id", "-u", name}).exit_code == 0;
  }

  std::string marker() {
    markers_.push_back("mk" + unique_marker());
    return markers_.back();
  }

  CommandResult run(const std::vector<std::string>& args, std::chrono::seconds timeout = 120s) {
    std::vector<std::string> a{"run"};
    a.insert(a.end(), args.begin(), args.end());
    return runner_->client(a, timeout);
  }

  // The host path of the default workspace, created by a first (trivial) job if needed.
  std::string default_workspace() {
    const std::string ws = runner_->workspace("default");
    if (!fs::exists(ws)) {
      auto r = run({"--", "/bin/true"});
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    return ws;
  }

  // Copies the probe (this test binary) into the default workspace, root-owned 0755.
  void plant_probe() {
    if (probe_planted_) return;
    const std::string dest = default_workspace() + "/probe";
    std::error_code ec;
    fs::copy_file("/proc/self/exe", dest, fs::copy_options::overwrite_existing, ec);
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_EQ(chmod(dest.c_str(), 0755), 0);
    probe_planted_ = true;
  }

  // Runs the probe as a job with these checks; returns check -> result.
  std::map<std::string, std::string> probe(const std::vector<std::string>& checks, std::string* raw = nullptr) {
    plant_probe();
    std::vector<std::string> args{"--", "/usr/bin/env", "MOTOR_SANDBOX_PROBE=1", kProbeInJob};
    args.insert(args.end(), checks.begin(), checks.end());
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (raw) *raw = r.out + r.err;
    return parse_probe(r.out);
  }

  // A TCP listener on the host's 127.0.0.1 (ephemeral port), reachable from the host.
  int open_host_listener() {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(s, 0);
    listener_ = std::make_unique<Fd>(s);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(s, 16), 0);
    EXPECT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
    return ntohs(a.sin_port);
  }

  // The job cgroup directories below the test's parent, in every hierarchy.
  // Every cgroup under the runner's parent but the one its sandboxes built ahead wait in.
  std::vector<std::string> job_cgroup_dirs() {
    auto dirs = glob_dirs(fmt::format("/sys/fs/cgroup/*/{}/*", runner_->cgroup_parent()));
    std::erase_if(dirs, [](const std::string& d) { return d.find("/sandbox-pool-") != std::string::npos; });
    return dirs;
  }
  // After a job's end: its cgroup is normally gone before `terminal`; one a dying process kept
  // busy (a loaded host) is removed in the background within seconds. What is left after 10 s leaked.
  std::vector<std::string> job_cgroup_dirs_left() {
    for (int i = 0; i < 100 && !job_cgroup_dirs().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return job_cgroup_dirs();
  }

  std::string exec_status() {
    RawClient c(runner_->socket());
    if (!c.connected()) return "";
    c.send_frame(R"({"id":1,"method":"exec.status","params":{}})");
    auto reply = c.read_frame(5000ms);
    return reply ? *reply : "";
  }

  struct Fd {
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
      if (fd >= 0) close(fd);
    }
    int fd;
  };

  std::unique_ptr<RunnerProcess> runner_;
  std::unique_ptr<Fd> listener_;
  std::vector<std::string> markers_;
  std::string runner_env_canary_;
  bool probe_planted_ = false;
};

// Control: empty tmpfs root + pivot_root + old root detached (mount namespace). The runner's
// state directory and its job table (state.db) exist on the host; inside the job they do not
// exist at all (ENOENT, not merely EACCES).
TEST_F(RunnerIsolation, EmptyRoot_RunnerStateIsAbsent) {
  const std::string state_json = runner_->state_dir() + "/state.db";
  plant_probe();
  ASSERT_TRUE(fs::exists(state_json)) << "the runner keeps no state.db, so the test proves nothing";
  auto p = probe({"read:" + state_json, "stat:" + runner_->state_dir(), "stat:" + runner_->dir(),
                  "stat:" + runner_->socket(), "ls:" + runner_->state_dir() + "/jobs"});
  EXPECT_EQ(p["read:" + state_json], "ENOENT");
  EXPECT_EQ(p["stat:" + runner_->state_dir()], "ENOENT");
  EXPECT_EQ(p["stat:" + runner_->dir()], "ENOENT");
  EXPECT_EQ(p["stat:" + runner_->socket()], "ENOENT");
  EXPECT_EQ(p["ls:" + runner_->state_dir() + "/jobs"], "ENOENT");
}

// Control: only the job's own workspace is bound (empty root). Another key's workspace, made by
// a previous real job, and another caller's workspace exist on the host but not in the job.
TEST_F(RunnerIsolation, EmptyRoot_OtherWorkspacesAreAbsent) {
  auto made = run({"-w", "other", "-c", "echo other-secret > secret.txt"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string other = runner_->workspace("other") + "/secret.txt";
  ASSERT_TRUE(fs::exists(other)) << other;
  // Another caller's workspace, planted world-readable so only the mount tree can hide it.
  const std::string foreign_dir = runner_->workspace("ws", "someone-else");
  fs::create_directories(foreign_dir);
  chmod(foreign_dir.c_str(), 0755);
  chmod(fs::path(foreign_dir).parent_path().c_str(), 0755);  // the runner's own dirs above stay 0711
  write_file(foreign_dir + "/secret.txt", "foreign-secret\n");
  chmod((foreign_dir + "/secret.txt").c_str(), 0644);

  auto p = probe({"read:" + other, "read:" + foreign_dir + "/secret.txt", "stat:" + runner_->workspace("other"),
                  "read:/workspace/../other/secret.txt", "ls:/workspace"});
  EXPECT_EQ(p["read:" + other], "ENOENT");
  EXPECT_EQ(p["read:" + foreign_dir + "/secret.txt"], "ENOENT");
  EXPECT_EQ(p["stat:" + runner_->workspace("other")], "ENOENT");
  EXPECT_EQ(p["read:/workspace/../other/secret.txt"], "ENOENT");
  EXPECT_EQ(p["ls:/workspace"], "probe");  // only what is in this workspace
  auto cat = run({"-c", "cat " + other + " " + foreign_dir +
                             "/secret.txt; find / -path /proc -prune -o -path /usr -prune -o -name secret.txt -print "
                             "2>/dev/null"});
  EXPECT_EQ(cat.out.find("secret"), std::string::npos) << cat.out;
}

// Control: empty root. The host's /root and /etc/shadow are absent, not just unreadable.
TEST_F(RunnerIsolation, EmptyRoot_HostSecretsAreAbsent) {
  ASSERT_TRUE(fs::exists("/etc/shadow"));
  auto p = probe({"read:/etc/shadow", "stat:/root", "ls:/root", "stat:/home", "stat:/var", "stat:/sys"});
  EXPECT_EQ(p["read:/etc/shadow"], "ENOENT");
  EXPECT_EQ(p["stat:/root"], "ENOENT");
  EXPECT_EQ(p["ls:/root"], "ENOENT");
  EXPECT_EQ(p["stat:/home"], "ENOENT");
  EXPECT_EQ(p["stat:/var"], "ENOENT");
  EXPECT_EQ(p["stat:/sys"], "ENOENT");
}

// Control: read-only mounts (toolchain binds RDONLY, the root tmpfs remounted read-only, /dev
// read-only). Writes get EROFS (a plain permission check would give EACCES); the workspace and
// /tmp stay writable.
TEST_F(RunnerIsolation, ReadOnlyMounts_WritesOutsideWorkspaceAndTmpFail) {
  auto p = probe({"write:/usr", "write:/usr/bin", "write:/etc", "write:/", "write:/.motor", "write:/dev",
                  "write:/workspace", "write:/tmp"});
  EXPECT_EQ(p["write:/usr"], "EROFS");
  EXPECT_EQ(p["write:/usr/bin"], "EROFS");
  EXPECT_EQ(p["write:/etc"], "EROFS");
  EXPECT_EQ(p["write:/"], "EROFS");
  EXPECT_EQ(p["write:/.motor"], "EROFS");
  EXPECT_EQ(p["write:/dev"], "EROFS");
  EXPECT_EQ(p["write:/workspace"], "OK");
  EXPECT_EQ(p["write:/tmp"], "OK");
}

// Control: no CAP_MKNOD (all capability sets empty) and nodev on every writable mount.
TEST_F(RunnerIsolation, NoCapabilities_CannotCreateDeviceNodes) {
  auto p = probe({"mknod:/workspace/mem", "mknod:/tmp/mem"});
  EXPECT_EQ(p["mknod:/workspace/mem"], "EPERM");
  EXPECT_EQ(p["mknod:/tmp/mem"], "EPERM");
  EXPECT_FALSE(fs::exists(runner_->workspace("default") + "/mem"));
}

// Control: CLONE_NEWPID + a fresh /proc. The job sees only its own processes: 1 is motor-init,
// 2 the command. A host process the test starts is not there.
TEST_F(RunnerIsolation, PidNamespace_ProcShowsOnlyTheJob) {
  const std::string m = "3600." + unique_marker();  // digits: a valid sleep interval
  markers_.push_back(m);
  const pid_t host = fork();
  if (host == 0) {
    execl("/bin/sleep", "sleep", m.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(host, 0);
  for (int i = 0; i < 200 && processes_with(m).empty(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_FALSE(processes_with(m).empty());
  auto p = probe({"pids", "readlink:/proc/1/exe", fmt::format("stat:/proc/{}", host),
                  fmt::format("stat:/proc/{}", runner_->pid())});
  EXPECT_EQ(p["pids"], "1:motor-init,2:probe");
  // motor-init is not dumpable: its exe link is closed to the job (the pids list names it).
  EXPECT_EQ(p["readlink:/proc/1/exe"], "EACCES");
  // (Both are far above the job's own pids 1 and 2 on any host that runs a test suite.)
  EXPECT_EQ(p[fmt::format("stat:/proc/{}", host)], "ENOENT");
  EXPECT_EQ(p[fmt::format("stat:/proc/{}", runner_->pid())], "ENOENT");
  auto ps = run({"-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"});
  EXPECT_EQ(ps.out.find(m), std::string::npos) << ps.out;
  kill(host, SIGKILL);
  waitpid(host, nullptr, 0);
}

// Control: CLONE_NEWNET with only loopback. A listener the test opens on the host's 127.0.0.1
// is reachable from the host but not from the job.
TEST_F(RunnerIsolation, NetNamespace_CannotReachTheHostsLoopback) {
  const int port = open_host_listener();
  {  // Reachable from the host: the job's failure is the namespace's doing.
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    close(c);
  }
  const std::string check = fmt::format("connect:{}", port);
  auto p = probe({check, "netdevs", "loopback"});
  EXPECT_EQ(p[check], "ECONNREFUSED");
  EXPECT_EQ(p["netdevs"], "lo");
  EXPECT_EQ(p["loopback"], "OK");  // loopback works inside: the refusal is not a broken stack
}

// Control: the job's network namespace comes from the job starter's pool of fresh ones
// (sandbox/netns_pool.hpp), entered with setns, and is not the runner's. Each is handed out
// once: the job's namespace is one the starter held before, and it holds it no longer.
TEST_F(RunnerIsolation, NetNamespacePool_TheJobGetsAFreshPooledNamespace) {
  const pid_t starter = job_starter_of(runner_->pid());
  ASSERT_GT(starter, 0) << "no motor-starter process under the runner";
  const std::string runner_ns = fs::read_symlink(fmt::format("/proc/{}/ns/net", runner_->pid())).string();
  auto pool = full_pool(starter, 4, runner_ns);
  ASSERT_EQ(pool.size(), 4u) << "the pool never filled";
  // A sandbox built ahead of the job (runner/sandbox_pool.hpp) took its namespace from the pool
  // before this snapshot: the job may run in that one.
  if (const pid_t waiting = helper_of(runner_->pid(), "motor-init"); waiting > 0) {
    std::error_code ec;
    const auto ns = fs::read_symlink(fmt::format("/proc/{}/ns/net", waiting), ec);
    if (!ec) pool.insert(ns.string());
  }
  const std::string m = marker();
  auto r = run({"--", "/bin/sh", "-c", "readlink /proc/self/ns/net; sleep 1 # " + m});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string job_ns = trim(r.out);
  EXPECT_TRUE(pool.count(job_ns)) << job_ns << " was not in the pool";
  EXPECT_NE(job_ns, runner_ns);
}

// Clean-up safety: the pooled namespaces are held only by the starter's fds; when the runner
// is killed the starter dies with it (PR_SET_PDEATHSIG) and no process holds any of them.
TEST_F(RunnerIsolation, NetNamespacePool_RunnerKilledLeavesNoNamespaceBehind) {
  const pid_t starter = job_starter_of(runner_->pid());
  ASSERT_GT(starter, 0) << "no motor-starter process under the runner";
  const auto pool = full_pool(starter, 4, fs::read_symlink(fmt::format("/proc/{}/ns/net", runner_->pid())).string());
  ASSERT_EQ(pool.size(), 4u) << "the pool never filled";
  for (const auto& h : holders_of(pool)) EXPECT_TRUE(h.starts_with(std::to_string(starter) + " ")) << h;
  runner_->kill9();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline && fs::exists(fmt::format("/proc/{}/fd", starter)) &&
         !netns_fds_of(starter).empty())
    std::this_thread::sleep_for(20ms);
  const auto left = holders_of(pool);
  EXPECT_TRUE(left.empty()) << "still held: " << left.front();
  ASSERT_TRUE(runner_->start()) << runner_->log();  // TearDown stops it cleanly
}

// Control: every capability set emptied (capset, ambient clear, bounding set drop).
TEST_F(RunnerIsolation, Capabilities_AllSetsAreZero) {
  auto p = probe({"status:CapInh", "status:CapPrm", "status:CapEff", "status:CapBnd", "status:CapAmb", "status:Uid"});
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(p[std::string("status:") + set], "0000000000000000") << set;
  }
  const std::string uid = trim(run_program({"/usr/bin/id", "-u", "motor-job"}).out);
  EXPECT_EQ(p["status:Uid"], fmt::format("{}\t{}\t{}\t{}", uid, uid, uid, uid));
}

// Control: PR_SET_NO_NEW_PRIVS.
TEST_F(RunnerIsolation, NoNewPrivs_IsSet) {
  auto p = probe({"status:NoNewPrivs"});
  EXPECT_EQ(p["status:NoNewPrivs"], "1");
}

// Control: no_new_privs + nosuid on the workspace. A root-owned setuid copy of `id` planted in
// the workspace runs as the job's account.
TEST_F(RunnerIsolation, NoNewPrivsAndNosuid_SetuidRootBinaryDoesNotElevate) {
  const std::string planted = default_workspace() + "/id-suid";
  std::error_code ec;
  fs::copy_file("/usr/bin/id", planted, fs::copy_options::overwrite_existing, ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_EQ(chown(planted.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(planted.c_str(), 04755), 0);
  struct stat st {};
  ASSERT_EQ(stat(planted.c_str(), &st), 0);
  ASSERT_TRUE(st.st_mode & S_ISUID);
  ASSERT_EQ(st.st_uid, 0u);

  const std::string uid = trim(run_program({"/usr/bin/id", "-u", "motor-job"}).out);
  auto r = run({"--", "/workspace/id-suid", "-u"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trim(r.out), uid);
  EXPECT_NE(trim(r.out), "0");
  auto full = run({"--", "/workspace/id-suid"});
  EXPECT_EQ(full.out.find("euid=0"), std::string::npos) << full.out;
}

// Control: the seccomp filter. Seccomp: 2, and every call of the reviewed table fails with the
// filter's EPERM (clone3: ENOSYS, so glibc falls back to clone); plain fork and the personality
// query still work. unshare(1) and mount(8) fail the same way.
TEST_F(RunnerIsolation, Seccomp_BlockedCallsFailWithEperm) {
  auto p = probe({"status:Seccomp", "syscalls"});
  EXPECT_EQ(p["status:Seccomp"], "2");
  size_t tried = 0;
  for (const auto& t : motor_sandbox_test::syscall_tries()) {
    const std::string key = std::string("syscall:") + t.name;
    ASSERT_TRUE(p.count(key)) << key;
    ++tried;
    switch (t.expect) {
      case motor_sandbox_test::Expect::kEperm:
        EXPECT_EQ(p[key], "EPERM") << t.name;
        break;
      case motor_sandbox_test::Expect::kEnosys:
        EXPECT_EQ(p[key], "ENOSYS") << t.name;
        break;
      case motor_sandbox_test::Expect::kAllowed:
        EXPECT_NE(p[key], "EPERM") << t.name;
        break;
    }
  }
  EXPECT_GT(tried, 40u);
  auto u = run({"-c", "unshare --user --map-root-user /bin/true; echo unshare=$?"});
  EXPECT_NE(u.out.find("unshare=1"), std::string::npos) << u.out << u.err;
  EXPECT_NE(u.err.find("Operation not permitted"), std::string::npos) << u.err;
  auto mnt = run({"-c", "mount -t tmpfs none /tmp; echo mount=$?"});
  EXPECT_EQ(mnt.out.find("mount=0"), std::string::npos) << mnt.out << mnt.err;
}

// Control: the seccomp ioctl rule on TIOCSTI. On a pty the job opens from its own devpts and
// makes its controlling terminal, injecting input fails with EPERM (the host allows it:
// legacy_tiocsti). Once from C (the probe), once from python3's pty module.
TEST_F(RunnerIsolation, Seccomp_TiocstiOnTheJobsTerminalFails) {
  auto p = probe({"tiocsti"});
  EXPECT_EQ(p["tiocsti"], "EPERM");
  const std::string py =
      "import os, pty, fcntl, termios\n"
      "m, s = pty.openpty()\n"
      "name = os.ttyname(s)\n"
      "pid = os.fork()\n"
      "if pid == 0:\n"
      "    os.setsid()\n"
      "    fd = os.open(name, os.O_RDWR)\n"
      "    try:\n"
      "        fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n"
      "        os._exit(0)\n"
      "    except OSError as e:\n"
      "        os._exit(e.errno)\n"
      "_, st = os.waitpid(pid, 0)\n"
      "print('tiocsti_errno', os.waitstatus_to_exitcode(st))\n";
  auto r = run({"--", "/usr/bin/python3", "-c", py});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trim(r.out), "tiocsti_errno 1") << r.err;  // 1 = EPERM
}

// Control: the memory limit (memory.limit_in_bytes + memsw on v1). 256 MiB of real anonymous
// memory under --memory 64M is OOM-killed and the terminal record says oom_killed: true.
TEST_F(RunnerIsolation, MemoryLimit_BalloonIsOomKilledAndReported) {
  const std::string m = marker();
  auto r = run({"--json", "--memory", "64M", "--", "/usr/bin/python3", "-c",
                "b = b'x' * (256 << 20)  # " + m + "\nprint('survived', len(b))"});
  const std::string terminal = terminal_line(r.out);
  ASSERT_FALSE(terminal.empty()) << r.out << r.err;
  EXPECT_EQ(json_field(terminal, "/oom_killed"), "true") << terminal;
  EXPECT_EQ(json_field(terminal, "/outcome/type"), "signal") << terminal;  // the OOM killer's SIGKILL
  EXPECT_EQ(json_field(terminal, "/outcome/signal"), "9") << terminal;
  EXPECT_EQ(r.exit_code, 137);
  // The live watcher (v1: eventfd on memory.oom_control; v2: inotify on memory.events) saw the
  // kill while the job ran: its line comes before the job's "finished" line. (The exit-time
  // counter read alone would flag the terminal record but never write this line.)
  const std::string job_id = json_field(terminal, "/job_id");
  const std::string log = runner_->log();
  const auto seen = log.find("job " + job_id + ": OOM kill seen by the watcher");
  const auto finished = log.find("job " + job_id + ": finished");
  EXPECT_NE(seen, std::string::npos) << log;
  EXPECT_LT(seen, finished) << log;
  // The balloon really was big: the same job without a tight limit survives and is not flagged.
  auto ok = run({"--json", "--memory", "1G", "--", "/usr/bin/python3", "-c",
                 "b = b'x' * (256 << 20)  # " + m + "\nprint('survived', len(b))"});
  const std::string ok_terminal = terminal_line(ok.out);
  EXPECT_EQ(json_field(ok_terminal, "/oom_killed"), "false") << ok_terminal;
  EXPECT_EQ(json_field(ok_terminal, "/outcome/code"), "0") << ok_terminal;
  EXPECT_EQ(runner_->log().find("job " + json_field(ok_terminal, "/job_id") + ": OOM kill seen"), std::string::npos);
}

// Control: the pids limit (pids.max = pids_max = 64). A job that forks as much as it can gets
// EAGAIN below 64 processes; a real fork bomb stays at the limit while the runner keeps
// answering, and nothing of it is left afterwards.
TEST_F(RunnerIsolation, PidsLimit_ForkBombStopsAtTheLimit) {
  const std::string m = marker();
  const std::string counter =
      "import os, time  # " + m + "\n"
      "kids, err = [], None\n"
      "for i in range(300):\n"
      "    try:\n"
      "        pid = os.fork()\n"
      "    except OSError as e:\n"
      "        err = e.errno\n"
      "        break\n"
      "    if pid == 0:\n"
      "        time.sleep(60)\n"
      "        os._exit(0)\n"
      "    kids.append(pid)\n"
      "print('forked', len(kids), 'errno', err, flush=True)\n"
      "for k in kids: os.kill(k, 9)\n"
      "for k in kids: os.waitpid(k, 0)\n";
  auto c = run({"--", "/usr/bin/python3", "-c", counter});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  std::istringstream words(c.out);
  std::string w1, w3;
  int forked = -1, err = -1;
  words >> w1 >> forked >> w3 >> err;
  EXPECT_EQ(w1, "forked") << c.out;
  EXPECT_GT(forked, 32) << c.out;  // it really pushed against the limit
  EXPECT_EQ(err, EAGAIN) << c.out;
  // Without a working limit, stop here: a real fork bomb would harm this shared host.
  ASSERT_LT(forked, 64) << c.out;

  // The real thing: every process forks forever, ignoring failures; killed at its deadline.
  auto bomb = std::async(std::launch::async, [&] {
    return run({"--timeout", "6", "--", "/usr/bin/python3", "-c",
                "import os  # " + m + "\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"},
               60s);
  });
  int64_t most = 0, events_max = 0;
  std::vector<double> status_ms;
  const auto until = std::chrono::steady_clock::now() + 4s;
  while (std::chrono::steady_clock::now() < until) {
    for (const auto& d : glob_dirs(fmt::format("/sys/fs/cgroup/pids/{}/job-*", runner_->cgroup_parent()))) {
      most = std::max<int64_t>(most, std::atoll(read_file(d + "/pids.current").c_str()));
      const std::string ev = read_file(d + "/pids.events");
      if (ev.rfind("max ", 0) == 0) events_max = std::max<int64_t>(events_max, std::atoll(ev.c_str() + 4));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string st = exec_status();
    status_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_EQ(json_field(st, "/result/server_reachable"), "true") << st;
    std::this_thread::sleep_for(100ms);
  }
  auto b = bomb.get();
  EXPECT_EQ(b.exit_code, 124) << b.err.substr(0, 500);
  EXPECT_GT(most, 32);
  EXPECT_LE(most, 64);
  EXPECT_GT(events_max, 0) << "the bomb never hit pids.max";
  EXPECT_LT(*std::max_element(status_ms.begin(), status_ms.end()), 1000.0) << "the runner stalled";
  EXPECT_TRUE(processes_with(m).empty());
  const auto left_over = job_cgroup_dirs_left();
  EXPECT_TRUE(left_over.empty()) << left_over.front();
  auto after = run({"-c", "echo still fine"});
  EXPECT_EQ(after.out, "still fine\n");
}

// Control: the job's cgroup goes before its terminal record (Job::finish; the removal runs on
// libuv's pool). A job whose processes are all gone leaves an empty cgroup, which is removed at
// once: nothing of it may be there when the client reads `terminal`, not even for a moment.
TEST_F(RunnerIsolation, CgroupRemoval_NothingOfTheJobIsLeftWhenItsTerminalRecordArrives) {
  for (int round = 0; round < 5; ++round) {
    RawClient c(runner_->socket());
    ASSERT_TRUE(c.connected());
    c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true"}})");
    std::optional<std::string> frame;
    while ((frame = c.read_frame(30000ms)) && frame->find(R"("type":"terminal")") == std::string::npos) {
    }
    ASSERT_TRUE(frame) << "no terminal record";
    const auto left = job_cgroup_dirs();
    EXPECT_TRUE(left.empty()) << left.front() << " is still there when the terminal record arrives";
  }
}

// Control: the cpuset claim. `--cpus 1` gets one whole core: Cpus_allowed_list in the job equals
// the claim exec.status reports while the job runs, and is one core's thread siblings.
TEST_F(RunnerIsolation, Cpuset_CpusAllowedListEqualsTheClaim) {
  std::set<std::string> cores;
  for (const auto& d : glob_dirs("/sys/devices/system/cpu/cpu[0-9]*")) {
    const std::string s = trim(read_file(d + "/topology/thread_siblings_list"));
    if (!s.empty()) cores.insert(s);
  }
  MOTOR_REQUIRE(cores.size() >= 2, "a claim of one core is only distinguishable on a host with two or more cores");
  auto job = std::async(std::launch::async, [&] {
    return run({"--cpus", "1", "-c", "grep Cpus_allowed_list /proc/self/status; sleep 3"});
  });
  std::string claim;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (claim.empty() && std::chrono::steady_clock::now() < until) {
    const std::string st = exec_status();
    const std::string c = json_field(st, "/result/running_jobs/0/cpus");
    if (!c.starts_with("<")) claim = c;
    std::this_thread::sleep_for(50ms);
  }
  auto r = job.get();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_FALSE(claim.empty()) << "exec.status never listed the running job";
  const std::string prefix = "Cpus_allowed_list:";
  ASSERT_TRUE(r.out.starts_with(prefix)) << r.out;
  const std::string in_job = trim(r.out.substr(prefix.size()));
  EXPECT_EQ(in_job, claim);
  EXPECT_TRUE(cores.count(in_job)) << in_job << " is not one core's CPUs";
  const std::string host_all = trim(run_program({"/usr/bin/nproc", "--all"}).out);
  EXPECT_NE(in_job, fmt::format("0-{}", std::atoi(host_all.c_str()) - 1));
}

// Control: the environment filter. Canaries named GH_TOKEN and MY_SECRET_VALUE (and a
// CARGO_REGISTRY_TOKEN, whose prefix is forwarded by default) are dropped although the runner's
// allow list names GH_*, MY_*; they never appear in the job's `env` or /proc/1/environ. A
// forwarded variable does appear there, so the reads are real. The runner's own environment
// does not reach the job either.
TEST_F(RunnerIsolation, EnvFilter_SecretCanariesNeverReachTheJob) {
  const std::string m = marker();
  const std::vector<std::string> env_args{"--env", "GH_TOKEN=canary-gh-" + m,
                                          "--env", "MY_SECRET_VALUE=canary-secret-" + m,
                                          "--env", "CARGO_REGISTRY_TOKEN=canary-cargo-" + m,
                                          "--env", "GH_HOST=forwarded-" + m};
  std::vector<std::string> args = env_args;
  for (const char* a : {"-c", "env; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo ---; "
                              "cat /proc/self/environ | tr '\\0' '\\n'; echo ---; tr '\\0' '\\n' < /proc/$$/environ"}) {
    args.emplace_back(a);
  }
  auto r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("canary-"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(runner_env_canary_), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("MOTOR_RUNNER_ENV_CANARY"), std::string::npos) << r.out;
  // The forwarded one is there three times: env, cat's and the shell's environ (cat opens its
  // own: a file bash opened for tr before its exec reads an environ that is gone). init's environ is
  // unreadable (motor-init is not dumpable).
  EXPECT_NE(r.err.find("/proc/1/environ: Permission denied"), std::string::npos) << r.err;
  size_t seen = 0;
  for (size_t at = r.out.find("GH_HOST=forwarded-" + m); at != std::string::npos;
       at = r.out.find("GH_HOST=forwarded-" + m, at + 1)) {
    ++seen;
  }
  EXPECT_EQ(seen, 3u) << r.out;

  std::vector<std::string> json_args{"--json"};
  json_args.insert(json_args.end(), env_args.begin(), env_args.end());
  json_args.insert(json_args.end(), {"--", "/bin/true"});
  auto j = run(json_args);
  std::string accepted;
  {
    std::istringstream in(j.out);
    std::string line;
    while (std::getline(in, line)) {
      if (json_field(line, "/type") == "accepted") accepted = line;
    }
  }
  EXPECT_EQ(json_field(accepted, "/env_not_forwarded"), R"(["CARGO_REGISTRY_TOKEN","GH_TOKEN","MY_SECRET_VALUE"])")
      << accepted;
  EXPECT_EQ(j.out.find("canary-"), std::string::npos);
}

// Control: the environment filter's SSH_AUTH_SOCK rule (the allow list has SSH_*). Neither a
// requested SSH_AUTH_SOCK nor the client's own one reaches the job.
TEST_F(RunnerIsolation, EnvFilter_SshAuthSockNeverCrosses) {
  const std::string m = marker();
  auto r = run_program({MOTOR_CLIENT_BIN, "--socket", runner_->socket(), "run", "--no-sync", "--env",
                        "SSH_AUTH_SOCK=/tmp/agent-" + m + ".sock", "--env", "SSH_ASKPASS_REQUIRE=never", "-c",
                        "env; tr '\\0' '\\n' < /proc/self/environ"},
                       {"SSH_AUTH_SOCK=/tmp/client-agent-" + m + ".sock"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("SSH_AUTH_SOCK"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(m), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SSH_ASKPASS_REQUIRE=never"), std::string::npos) << r.out;  // SSH_* is allowed
}

// Control: the deadline kills the job's whole cgroup (cgroup.kill) and the runner reports only
// once it is empty. An infinite loop with a busy child and a setsid'd busy daemon hits
// --timeout 2: the client exits 124 and nothing of the job remains, neither processes nor
// cgroup directories.
TEST_F(RunnerIsolation, CgroupKill_TimeoutLeavesNothingBehind) {
  const std::string m = marker();
  const std::string loop = "while :; do :; done # " + m;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run({"--timeout", "2", "-c",
                fmt::format("sh -c '{0}' & (setsid sh -c '{0}' &); echo looping; {0}", loop)},
               40s);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_EQ(r.out, "looping\n");
  EXPECT_GE(took, 2s);
  EXPECT_LT(took, 15s);
  EXPECT_TRUE(processes_with(m).empty()) << processes_with(m).size() << " processes of the job remain";
  const auto left = job_cgroup_dirs_left();
  EXPECT_TRUE(left.empty()) << left.front();
  EXPECT_EQ(json_field(exec_status(), "/result/running_jobs"), "[]");
}

}  // namespace
}  // namespace motor::test
