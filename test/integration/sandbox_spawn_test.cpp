// The sandbox through the runner's real spawn_job (src/sandbox/spawn.cpp) and a real job cgroup:
// the seam works end to end, with setsid, the cgroup attach and spawn_job's own fd handling in
// the picture. Everything created (cgroups, the temp tree) is removed, also on failure; the job's
// processes die with its PID namespace.
#include <fcntl.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pwd.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/cgroup.hpp"
#include "sandbox/sandbox_plan.hpp"
#include "sandbox/spawn.hpp"
#include "sandbox/starter.hpp"

namespace fs = std::filesystem;

namespace {

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

std::vector<std::string> cgroup_dirs(const std::string& parent) {
  std::vector<std::string> out;
  for (const std::string& pattern : {"/sys/fs/cgroup/*/" + parent, "/sys/fs/cgroup/" + parent}) {
    glob_t g{};
    if (glob(pattern.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return out;
}

std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20000) <= 0) break;  // a stuck job fails the test rather than hanging it
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

class SandboxSpawn : public ::testing::Test {
 protected:
  void SetUp() override {
    const passwd* pw = getpwnam("motor-job");
    const char* init = std::getenv("MOTOR_INIT_BIN");
    std::string init_path = init ? init : "";
#ifdef MOTOR_INIT_BIN
    if (init_path.empty()) init_path = MOTOR_INIT_BIN;
#endif
    if (init_path.empty()) {
      const fs::path p = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "src/sandbox/init/motor-init";
      if (fs::exists(p)) init_path = p.string();
    }
    const bool ready = geteuid() == 0 && pw && !init_path.empty();
    if (!ready) {
      if (in_ci()) FAIL() << "required under CI: root, the motor-job account and motor-init";
      GTEST_SKIP() << "needs root, motor-job and motor-init";
    }
    char tmpl[] = "/tmp/motor-sandbox-spawn-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    chmod(root_.c_str(), 0755);
    fs::create_directory(root_ / "ws");
    ASSERT_EQ(chown((root_ / "ws").c_str(), pw->pw_uid, pw->pw_gid), 0);
    config_.workspace = {(root_ / "ws").string(), "/job/ws"};
    config_.read_only = {{fs::read_symlink("/proc/self/exe").string(), "/job/probe/motor_integration_tests"}};
    config_.uid = pw->pw_uid;
    config_.gid = pw->pw_gid;
    config_.init_path = init_path;
    parent_ = "motor-test-sandbox-" + std::to_string(getpid());
  }

  void TearDown() override {
    if (job_) {
      (void)job_->kill_all();
      for (int i = 0; i < 100 && job_->populated().ok() && *job_->populated(); ++i) usleep(10000);
      EXPECT_TRUE(job_->remove().ok());
    }
    for (const auto& d : cgroup_dirs(parent_)) rmdir(d.c_str());
    EXPECT_TRUE(cgroup_dirs(parent_).empty()) << "cgroup left behind";
    if (!root_.empty()) fs::remove_all(root_);
  }

  fs::path root_;
  motor::sandbox::SandboxConfig config_;
  std::string parent_;
  std::unique_ptr<motor::sandbox::JobCgroup> job_;
};

TEST_F(SandboxSpawn, SpawnJobRunsTheSandboxedCommand) {
  auto driver = motor::sandbox::detect_cgroups(parent_);
  ASSERT_TRUE(driver.ok()) << driver.error().message;
  auto job = (*driver)->create("job-1", {});
  ASSERT_TRUE(job.ok()) << job.error().message;
  job_ = std::move(*job);

  auto plan = motor::sandbox::plan_sandbox(config_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const motor::sandbox::ChildHooks hooks = motor::sandbox::make_child_hooks(*plan);

  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  motor::sandbox::SpawnSpec spec;
  spec.executable = motor::sandbox::kSandboxInitPath;
  spec.argv = motor::sandbox::init_argv({"/job/probe/motor_integration_tests", "pids", "status:CapEff", "status:CapBnd",
                                         "status:NoNewPrivs", "status:Seccomp", "read:/etc/shadow", "write:/usr",
                                         "hostname", "netdevs", "fds"});
  spec.env = {"MOTOR_SANDBOX_PROBE=1", "PATH=/usr/bin:/bin"};
  spec.cwd = "/job/ws";
  spec.uid = config_.uid;
  spec.gid = config_.gid;
  spec.stdin_fd = devnull;
  spec.stdout_fd = out[1];
  spec.stderr_fd = out[1];
  spec.cgroup = job_.get();
  spec.hooks = &hooks;
  auto spawned = motor::sandbox::spawn_job(spec);
  close(out[1]);
  close(devnull);
  ASSERT_TRUE(spawned.ok()) << spawned.error().message;
  EXPECT_EQ(read_all(spawned->setup_status.get()), "");  // EOF with no data: exec'd
  const std::string output = read_all(out[0]);
  close(out[0]);
  pollfd p{spawned->pidfd.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1);
  auto status = motor::sandbox::reap_pidfd(spawned->pidfd.get());
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << output;

  std::map<std::string, std::string> r;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) r[line.substr(0, eq)] = line.substr(eq + 3);
  }
  EXPECT_EQ(r["pids"], "1:motor-init,2:motor_integrati");
  EXPECT_EQ(r["status:CapEff"], "0000000000000000");
  EXPECT_EQ(r["status:CapBnd"], "0000000000000000");
  EXPECT_EQ(r["status:NoNewPrivs"], "1");
  EXPECT_EQ(r["status:Seccomp"], "2");
  EXPECT_EQ(r["read:/etc/shadow"], "ENOENT");
  EXPECT_EQ(r["write:/usr"], "EROFS");
  EXPECT_EQ(r["hostname"], "motor-job");
  EXPECT_EQ(r["netdevs"], "lo");
  EXPECT_EQ(r["fds"], "0,1,2");
}

// --- A sandbox built by a process with no capabilities (job_backend = systemd) -------------------

// What a unit with User=motor-job, CapabilityBoundingSet= (empty) and NoNewPrivileges=yes gives
// motor-unit-entry: the job account, every capability set empty, no_new_privs. 0 or an errno.
int become_capabilityless(uid_t uid, gid_t gid, gid_t extra_group) {
  for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return errno;
  }
  const gid_t groups[] = {gid, extra_group};
  if (setgroups(extra_group ? 2 : 1, groups) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) return errno;
  // The uid change left this process non-dumpable (its /proc files root's); the exec of
  // motor-unit-entry makes it dumpable again, and the child's own id maps need that.
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return errno;
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : errno;
}

struct BuilderRun {
  std::string output;  // the job's stdout and stderr, then the builder's own complaint if any
  int exit_code = -1;  // the builder's: the job's exit code, or 120+ for a builder failure
};

// Forks a capability-less builder that plans `config` (own_user_namespace) and spawns `command`
// under motor-init with spawn_job, as motor-unit-entry does; returns what it saw.
BuilderRun run_from_capabilityless_builder(motor::sandbox::SandboxConfig config, const std::string& command,
                                           gid_t extra_group = 0) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return {"pipe2 failed", -1};
  const pid_t builder = fork();
  if (builder == 0) {
    auto fail = [&](const std::string& why, int code) {
      (void)!write(out[1], why.data(), why.size());
      _exit(code);
    };
    if (int e = become_capabilityless(config.uid, config.gid, extra_group); e != 0) fail(std::string("unit emulation: ") + strerror(e), 120);
    config.own_user_namespace = true;
    auto plan = motor::sandbox::plan_sandbox(config);
    if (!plan) fail("plan: " + plan.error().message, 121);
    const motor::sandbox::ChildHooks hooks = motor::sandbox::make_child_hooks(*plan);
    motor::sandbox::PassedCgroup cgroup;  // the caller's own, as the unit's is motor-unit-entry's
    motor::sandbox::SpawnSpec spec;
    spec.executable = motor::sandbox::kSandboxInitPath;
    spec.argv = motor::sandbox::init_argv({"/bin/sh", "-c", command});
    spec.env = {"PATH=/usr/bin:/bin", "LANG=C"};
    spec.cwd = "/job/ws";
    spec.uid = config.uid;
    spec.gid = config.gid;
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    spec.stdin_fd = devnull;
    spec.stdout_fd = out[1];
    spec.stderr_fd = out[1];
    spec.cgroup = &cgroup;
    spec.hooks = &hooks;
    spec.share_memory_until_exec = true;  // as motor-unit-entry spawns
    auto spawned = motor::sandbox::spawn_job(spec);
    if (!spawned) fail("spawn: " + spawned.error().message, 122);
    const std::string setup = read_all(spawned->setup_status.get());
    if (!setup.empty()) fail("setup: " + setup, 123);
    pollfd p{spawned->pidfd.get(), POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) fail("the job did not end", 124);
    auto status = motor::sandbox::reap_pidfd(spawned->pidfd.get());
    _exit(status && WIFEXITED(*status) ? WEXITSTATUS(*status) : 125);
  }
  close(out[1]);
  BuilderRun run;
  run.output = read_all(out[0]);
  close(out[0]);
  int status = 0;
  if (builder > 0 && waitpid(builder, &status, 0) == builder && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

class CapabilitylessBuilder : public SandboxSpawn {
 protected:
  void SetUp() override {
    SandboxSpawn::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // The builder reaches motor-init as the job account: a copy where it may (the build tree
    // may sit under a directory only root can search).
    fs::copy_file(config_.init_path, root_ / "motor-init");
    chmod((root_ / "motor-init").c_str(), 0755);
    config_.init_path = (root_ / "motor-init").string();
    config_.read_only.clear();
  }
  std::string run_ok(const std::string& command) {
    BuilderRun r = run_from_capabilityless_builder(config_, command);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
};

TEST_F(CapabilitylessBuilder, TheJobRunsAsTheJobAccount) {
  EXPECT_EQ(run_ok("id -u; id -g; id -G"),
            std::to_string(config_.uid) + "\n" + std::to_string(config_.gid) + "\n" + std::to_string(config_.gid) + "\n");
}

TEST_F(CapabilitylessBuilder, TheJobsUserNamespaceMapsOnlyItsOwnIds) {
  const std::string u = std::to_string(config_.uid), g = std::to_string(config_.gid);
  EXPECT_EQ(run_ok("tr -s ' ' < /proc/self/uid_map; tr -s ' ' < /proc/self/gid_map; cat /proc/self/setgroups"),
            " " + u + " " + u + " 1\n " + g + " " + g + " 1\ndeny\n");
}

TEST_F(CapabilitylessBuilder, NoCapabilitiesNoNewPrivsSeccomp) {
  EXPECT_EQ(run_ok("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t'"),
            "CapInh:0000000000000000\nCapPrm:0000000000000000\nCapEff:0000000000000000\nCapBnd:0000000000000000\n"
            "CapAmb:0000000000000000\nNoNewPrivs:1\nSeccomp:2\n");
}

TEST_F(CapabilitylessBuilder, EveryNamespaceIsTheJobsOwn) {
  std::string host;
  for (const char* ns : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
    host += fs::read_symlink(std::string("/proc/self/ns/") + ns).string() + "\n";
  }
  const std::string job = run_ok("for n in user mnt pid net ipc uts cgroup; do readlink /proc/self/ns/$n; done");
  std::istringstream a(host), b(job);
  for (std::string h, j; std::getline(a, h) && std::getline(b, j);) EXPECT_NE(h, j);
  EXPECT_EQ(std::count(job.begin(), job.end(), '\n'), 7) << job;
}

TEST_F(CapabilitylessBuilder, InitIsPidOneAndTheHostIsGone) {
  EXPECT_EQ(run_ok("cat /proc/1/comm; echo $$; hostname; ls /sys /root /var /etc/shadow 2>&1 | wc -l"),
            "motor-init\n2\nmotor-job\n4\n");
}

TEST_F(CapabilitylessBuilder, DevHoldsTheHostsNodesReadOnly) {
  EXPECT_EQ(run_ok("ls /dev | tr '\\n' ,; echo; echo x > /dev/null && head -c 3 /dev/zero | wc -c; "
                   "chmod 0600 /dev/null 2>&1 | grep -c 'Read-only'; stat -c %t:%T /dev/null /dev/urandom"),
            "fd,full,null,ptmx,pts,random,shm,stderr,stdin,stdout,tty,urandom,zero,\n3\n1\n1:3\n1:9\n");
}

TEST_F(CapabilitylessBuilder, ReadOnlyEverywhereButTheWorkspaceAndTmp) {
  EXPECT_EQ(run_ok("touch /job/ws/f /tmp/f && echo ok; for d in /usr /etc /; do touch $d/f 2>&1 | grep -c 'Read-only'; done"),
            "ok\n1\n1\n1\n");
}

TEST_F(CapabilitylessBuilder, NoNestedNamespaceNoMknodNoMount) {
  // The job is root of nothing: a user namespace of its own would give it capabilities again.
  EXPECT_EQ(run_ok("unshare -U true 2>&1 | grep -c 'Operation not permitted'; "
                   "mknod /tmp/n c 1 3 2>&1 | grep -c 'Operation not permitted'; "
                   "mount -t tmpfs none /tmp 2>&1 | grep -c -e 'permission denied' -e 'must be superuser' -e 'not permitted'"),
            "1\n1\n1\n");
}

TEST_F(CapabilitylessBuilder, PlanRefusesWhatOnlyTheDirectBackendCanBuild) {
  config_.own_user_namespace = true;
  auto as_root = motor::sandbox::plan_sandbox(config_);  // this test runs as root, not as motor-job
  ASSERT_FALSE(as_root.ok());
  EXPECT_NE(as_root.error().message.find("built by the job account itself"), std::string::npos) << as_root.error().message;
  config_.read_only.push_back({"/usr/share", "/job/shared", motor::sandbox::IdMap{0, config_.uid, 0, config_.gid}});
  BuilderRun r = run_from_capabilityless_builder(config_, "true");
  EXPECT_EQ(r.exit_code, 121);
  EXPECT_NE(r.output.find("needs the direct job backend"), std::string::npos) << r.output;
}

TEST_F(CapabilitylessBuilder, ABuilderWithAnotherGroupIsRefused) {
  // setgroups is denied in the job's user namespace: a group the builder has, the job would keep.
  BuilderRun r = run_from_capabilityless_builder(config_, "id -G", /*extra_group=*/4242);
  EXPECT_EQ(r.exit_code, 121) << r.output;
  EXPECT_NE(r.output.find("supplementary group 4242"), std::string::npos) << r.output;
}

}  // namespace
