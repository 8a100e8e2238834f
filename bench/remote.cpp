// Remote callers (issue 18): what `motor --host` costs over OpenSSH against a plain ssh command on
// a warm control master, measured in the same run (bench/README.md). A real sshd on 127.0.0.1
// (test/support/sshd_harness), the bridge account, a test runner.
//
//  1. `motor --host ssh://motor@127.0.0.1:P run --no-sync -- true`, its key's forced command
//     `motor-bridge --caller bench`, through a warm control master, against
//     `ssh -S MASTER -p P motor@127.0.0.1 true` through a warm master of a forced-command-free
//     key (the one session a job needs at the least, with nothing of Motor in it). Interleaved,
//     medians. Goal: ratio <= 1.3.
//     Besides, to see where the difference goes: the same job through the local socket
//     (`motor --socket ... run --no-sync -- true`), and `ssh -S MASTER host true` on the motor
//     key's own master, whose forced command starts `motor-bridge`, which refuses that
//     command (exit 64): an SSH session plus the bridge's process start. And the same remote
//     job through a key whose forced command is the older `motor-runner connect` (the daemon's
//     binary with all its libraries), on a master of its own.
//     The client's calls after the first take a spare session its keeper opened beforehand
//     (src/client/ssh_spare.hpp); every timed command starts 200 ms after the one before, so that
//     the keeper's opening of the next spare lands in no timed command. Also shown: the call with
//     MOTOR_SSH_SPARE=0 (a session of its own, as before the keeper), and one right after another
//     call, while the next spare is still opening.
//  2. `motor --host ... run -- true` inside an unchanged, already-synced 10,000-file checkout,
//     against `motor --host ... run --no-sync -- true` (issue 20's no-change goal over SSH).
// Run as root (it starts a runner and sshd).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "stats.hpp"
#include "support/runner_harness.hpp"
#include "support/sshd_harness.hpp"

namespace {

using motor::bench::median;
using Clock = std::chrono::steady_clock;

// Wall time of one program, exec to exit (no polling: run_program's 5 ms steps would blur it).
double timed_ms(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
                int expect = 0) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    if (chdir(cwd.c_str()) < 0) _exit(127);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != expect) fmt::print(stderr, "failed ({}): {}\n", status, argv[0]);
  return ms;
}

// A git checkout of 10,000 files in 100 directories, committed (for the no-change run).
void make_checkout(const std::string& repo) {
  auto setup = motor::test::run_program(
      {"/bin/sh", "-ec",
       fmt::format("git init -q {0} && cd {0} && git config user.name b && git config user.email b@b && "
                   "for d in $(seq 1 100); do mkdir d$d; for f in $(seq 1 100); do "
                   "printf 'directory %s file %s\\n' $d $f > d$d/f$f.txt; done; done && git add -A && git commit -qm tree",
                   repo)},
      {}, std::chrono::seconds(600));
  if (setup.exit_code != 0) fmt::print(stderr, "checkout set-up failed: {}\n", setup.err);
}

// The medians' samples, each list one figure of the report.
struct Samples {
  std::vector<double> remote, baseline, checkout, remote2, local, bridge, old_bridge, no_spare, back_to_back;
};

struct Commands {
  std::vector<std::string> motor_run, motor_in_checkout, ssh_true, local_run, bridge_start;
  std::vector<std::string> env, old_env, no_spare_env;
  std::string dir, repo;
};

// Each timed command starts on a quiet machine: after a call, the keeper opens its next spare
// session (src/client/ssh_spare.hpp, about one SSH session's start), which would otherwise land
// in whatever is timed next (the peer, too). Agents call seconds apart; 200 ms is plenty here.
double settled_ms(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
                  int expect = 0) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return timed_ms(argv, env, cwd, expect);
}

Samples measure(const Commands& c, int n) {
  Samples s;
  for (int i = 0; i < n; ++i) {
    // Alternate the order so that neither always runs first after the other.
    if (i % 2 == 0) {
      s.remote.push_back(settled_ms(c.motor_run, c.env, c.dir));
      s.baseline.push_back(settled_ms(c.ssh_true, {}, c.dir));
    } else {
      s.baseline.push_back(settled_ms(c.ssh_true, {}, c.dir));
      s.remote.push_back(settled_ms(c.motor_run, c.env, c.dir));
    }
    s.no_spare.push_back(settled_ms(c.motor_run, c.no_spare_env, c.dir));
    s.checkout.push_back(settled_ms(c.motor_in_checkout, c.env, c.repo));
    s.remote2.push_back(settled_ms(c.motor_run, c.env, c.dir));
    // Right after another call: its spare has just been handed out and the next is opening.
    s.back_to_back.push_back(timed_ms(c.motor_run, c.env, c.dir));
    s.local.push_back(settled_ms(c.local_run, {}, c.dir));
    s.bridge.push_back(settled_ms(c.bridge_start, {}, c.dir, 64));
    s.old_bridge.push_back(settled_ms(c.motor_run, c.old_env, c.dir));
  }
  return s;
}

void print_figures(const Samples& s, int n) {
  const std::string load = motor::test::read_file("/proc/loadavg");
  fmt::print("remote callers over OpenSSH, medians of {} interleaved runs (ms); load average {}", n, load);
  fmt::print("  motor --host run --no-sync -- true (warm master)   {:8.2f}\n", median(s.remote));
  fmt::print("  ssh -S master host true (warm master, free key)    {:8.2f}\n", median(s.baseline));
  fmt::print("  ratio                                               {:8.2f}  (goal <= 1.3)\n", median(s.remote) / median(s.baseline));
  fmt::print("  the same, MOTOR_SSH_SPARE=0 (a session per call)   {:8.2f}  ratio {:.2f}\n", median(s.no_spare),
             median(s.no_spare) / median(s.baseline));
  fmt::print("  the same right after another call (no pause)       {:8.2f}  ratio {:.2f}\n", median(s.back_to_back),
             median(s.back_to_back) / median(s.baseline));
  fmt::print("  motor --socket run --no-sync -- true (local)       {:8.2f}\n", median(s.local));
  fmt::print("  ssh -S motor-key-master host (bridge starts, 64)   {:8.2f}\n", median(s.bridge));
  fmt::print("  the same remote job via motor-runner connect       {:8.2f}\n", median(s.old_bridge));
  fmt::print("  motor --host run -- true, unchanged 10,000 files   {:8.2f}\n", median(s.checkout));
  fmt::print("  motor --host run --no-sync -- true (same rounds)   {:8.2f}\n", median(s.remote2));
  fmt::print("  ratio                                               {:8.2f}  (issue 20's goal <= 1.15)\n",
             median(s.checkout) / median(s.remote2));
}

// Both systems over one sshd: the commands, the warm-up of both masters, the rounds, the figures.
int bench_over_ssh(const motor::test::RunnerProcess& runner, int n) {
  motor::test::SshServer sshd;
  const std::string bench_key = sshd.make_key("bench"), free_key = sshd.make_key("free");
  const std::string old_key = sshd.make_key("old");
  sshd.authorize("motor", motor::test::SshServer::bridge_options(runner.socket(), "bench"), bench_key);
  sshd.authorize("motor", motor::test::SshServer::runner_connect_options(runner.socket(), "bench"), old_key);
  sshd.authorize("motor", "restrict", free_key);
  if (!sshd.start()) {
    fmt::print(stderr, "sshd did not start:\n{}\n", sshd.log());
    return 1;
  }
  const std::string repo = sshd.dir() + "/repo";
  make_checkout(repo);
  Commands c;
  c.dir = sshd.dir();
  c.repo = repo;
  c.env = sshd.client_env(bench_key);
  c.env.push_back("XDG_CACHE_HOME=" + sshd.dir() + "/cache");
  // The older bridge's master lives in a runtime directory of its own (the ControlPath is per
  // runtime directory and host, so it would otherwise ride the motor-bridge key's master).
  c.old_env = sshd.client_env(old_key);
  const std::string old_runtime = sshd.dir() + "/run-old";
  mkdir(old_runtime.c_str(), 0700);
  c.old_env.push_back("XDG_RUNTIME_DIR=" + old_runtime);
  c.no_spare_env = c.env;
  c.no_spare_env.push_back("MOTOR_SSH_SPARE=0");
  c.motor_run = {MOTOR_CLIENT_BIN, "--host", sshd.url(), "run", "--no-sync", "--", "true"};
  c.motor_in_checkout = {MOTOR_CLIENT_BIN, "--host", sshd.url(), "run", "--", "true"};
  const std::string master = sshd.dir() + "/free.master";
  const std::vector<std::string> ssh_base{"/usr/bin/ssh", "-F", sshd.dir() + "/ssh_config", "-i", free_key, "-p",
                                          std::to_string(sshd.port()), "-o", "ControlPath=" + master};
  auto with = [](std::vector<std::string> v, const std::vector<std::string>& more) {
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  c.ssh_true = with(ssh_base, {"-o", "ControlMaster=no", "-T", "motor@127.0.0.1", "true"});
  c.local_run = {MOTOR_CLIENT_BIN, "--socket", runner.socket(), "run", "--no-sync", "--", "true"};
  // Warm both masters (and the checkout's first sync).
  timed_ms(with(ssh_base, {"-o", "ControlMaster=yes", "-o", "ControlPersist=600", "-f", "-N", "motor@127.0.0.1"}), {},
           sshd.dir());
  timed_ms(c.motor_run, c.env, sshd.dir());
  timed_ms(c.motor_run, c.old_env, sshd.dir());
  // The checkout: its first sync, a run whose fingerprint names the checkout watcher the first
  // one started (once it has walked the tree), and a run the watcher's answer vouches for.
  for (int i = 0; i < 3; ++i) settled_ms(c.motor_in_checkout, c.env, repo);
  timed_ms(c.ssh_true, {}, sshd.dir());
  const auto sockets = sshd.control_sockets();
  c.bridge_start = {"/usr/bin/ssh", "-F", sshd.dir() + "/ssh_config", "-i", bench_key, "-p",
                    std::to_string(sshd.port()), "-S", sockets.empty() ? "" : sockets[0], "-T",
                    "motor@127.0.0.1", "true"};
  print_figures(measure(c, n), n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (geteuid() != 0 || motor::test::sshd_binary().empty()) {
    fmt::print(stderr, "run as root, with openssh-server installed (scripts/setup)\n");
    return 1;
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 30;
  motor::test::RunnerProcess runner;
  if (!runner.start()) {
    fmt::print(stderr, "runner did not start:\n{}\n", runner.log());
    return 1;
  }
  return bench_over_ssh(runner, n);
}
