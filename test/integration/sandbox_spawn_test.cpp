// The sandbox through the runner's real spawn_job (src/sandbox/spawn.cpp) and a real job cgroup:
// the seam works end to end, with setsid, the cgroup attach and spawn_job's own fd handling in
// the picture. Everything created (cgroups, the temp tree) is removed, also on failure; the job's
// processes die with its PID namespace.
#include <fcntl.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pwd.h>
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

}  // namespace
