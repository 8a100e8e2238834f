// The sandboxed-child primitive (src/sandbox/sandboxed_child.hpp) in-process on a real loop, as
// libuv tests its handles: a command in the job sandbox under a real cgroup, through the
// in-process starter and through the job starter (a real helper process), reporting its exec
// and its exit once; a setup that fails; a child killed before it exec'd. Everything made (the
// cgroup parent, the temp tree, the helper) is removed, also on failure; uv_loop_close must
// find nothing open.
#include "sandbox/sandboxed_child.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/accounts.hpp"
#include "sandbox/cgroup.hpp"
#include "reactor/uv_handle.hpp"
#include "sandbox/job_starter.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

struct Outcome {
  std::optional<Error> start_failed;
  std::optional<sandbox::SandboxedExit> exit;
  bool execd = false;
  bool execd_before_exit = false;
  sandbox::SpawnTimes times;  // as SandboxedChild::spawn_times() had them at execd
};

class SandboxedChildTest : public ::testing::TestWithParam<bool> {  // true: through the job starter
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "needs root (namespaces, cgroups)");
    auto account = sandbox::lookup_unprivileged_account("motor-job");
    MOTOR_REQUIRE(account.ok(), "no motor-job account (scripts/setup creates it)");
    account_ = *account;
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    loop_live_ = true;
    parent_ = "motor-test-child-" + unique_marker();
    auto driver = sandbox::detect_cgroups(parent_);
    ASSERT_TRUE(driver.ok()) << driver.error().message;
    driver_ = std::move(*driver);
    dir_ = make_temp_dir();
    chmod(dir_.c_str(), 0711);
    workspace_ = dir_ + "/ws";
    ASSERT_EQ(mkdir(workspace_.c_str(), 0700), 0);
    ASSERT_EQ(chown(workspace_.c_str(), account_.uid, account_.gid), 0);
    if (GetParam()) {
      auto s = job_starter_.start(&loop_, 0);
      ASSERT_TRUE(s.ok()) << s.error().message;
      ASSERT_TRUE(job_starter_.running());
    }
  }
  void TearDown() override {
    cgroup_.reset();
    job_starter_.stop();
    // The reaper removes a dropped job cgroup on the loop: let it finish before the parent goes
    // (a parent with a child cgroup left cannot be removed).
    if (loop_live_) uv_run(&loop_, UV_RUN_DEFAULT);
    if (driver_) (void)driver_->remove_parent();
    driver_.reset();
    for (const char* h : {"unified", "memory", "pids", "cpuset", "freezer", "cpu", ""}) {
      const std::string hierarchy = *h ? "/sys/fs/cgroup/" + std::string(h) + "/" : "/sys/fs/cgroup/";
      rmdir((hierarchy + parent_).c_str());
    }
    if (!dir_.empty()) remove_tree(dir_);
    if (loop_live_) {
      uv_run(&loop_, UV_RUN_DEFAULT);  // close callbacks
      EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle was left open";
    }
  }
  sandbox::Starter& starter() { return GetParam() ? static_cast<sandbox::Starter&>(job_starter_) : in_process_; }

  sandbox::SandboxConfig box() const {
    sandbox::SandboxConfig b;
    b.workspace = {workspace_, "/workspace"};
    b.uid = account_.uid;
    b.gid = account_.gid;
    b.user_name = account_.name;
    b.group_name = account_.name;
    b.init_path = MOTOR_INIT_BIN;
    return b;
  }

  // Runs `command` in `b` with `cwd`; `kill_at_once`: SandboxedChild::kill right after start.
  // `make`: the starter makes that cgroup (SpawnSpec::make_cgroup) instead of the test; `at_exec`
  // runs when the child is seen to exec.
  Outcome run(const sandbox::SandboxConfig& b, const std::vector<std::string>& command, const std::string& cwd,
              bool kill_at_once = false, const sandbox::CgroupRequest* make = nullptr, std::function<void()> at_exec = {}) {
    Outcome o;
    if (!make) {
      auto cg = driver_->create("child-" + unique_marker(), {});
      EXPECT_TRUE(cg.ok()) << (cg.ok() ? "" : cg.error().message);
      if (!cg.ok()) return o;
      cgroup_ = std::move(*cg);
    }
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    UniqueFd out_read(fds[0]), out_write(fds[1]);
    UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    sandbox::SpawnSpec spec;
    spec.executable = sandbox::kSandboxInitPath;
    spec.argv = sandbox::init_argv(command);
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.cwd = cwd;
    spec.stdin_fd = dev_null.get();
    spec.stdout_fd = out_write.get();
    spec.stderr_fd = out_write.get();
    spec.cgroup = cgroup_.get();
    spec.make_cgroup = make;
    sandbox::SandboxedChild::Watch watch;
    watch.stdout_read = std::move(out_read);
    watch.timeout_ms = 20000;  // a stuck child fails the test rather than hanging it
    sandbox::SandboxedChild::Events events;
    sandbox::SandboxedChild* started = nullptr;  // execd comes on the loop, after start returned
    events.start_failed = [&o](const Error& e) { o.start_failed = e; };
    events.execd = [&o, &started, &at_exec] {
      if (started) o.times = started->spawn_times();
      o.execd = true;
      o.execd_before_exit = !o.exit;
      if (at_exec) at_exec();
    };
    events.exited = [&o](sandbox::SandboxedExit e) { o.exit = std::move(e); };
    auto child = sandbox::SandboxedChild::start(&loop_, starter(), b, spec, std::move(watch), std::move(events));
    started = child.get();
    out_write.reset();
    dev_null.reset();
    if (kill_at_once) child->kill();
    // The job starter's socket does not keep a loop alive by itself (the runner's has a listener):
    // a guard timer does here, and bounds the wait.
    reactor::UvHandle<uv_timer_t> guard;
    bool timed_out = false;
    EXPECT_EQ(guard.init(&timed_out, uv_timer_init, &loop_), 0);
    EXPECT_EQ(uv_timer_start(guard.get(), [](uv_timer_t* t) { *static_cast<bool*>(t->data) = true; }, 30000, 0), 0);
    while (!o.exit && !o.start_failed && !timed_out) uv_run(&loop_, UV_RUN_ONCE);
    EXPECT_FALSE(timed_out) << "no answer in 30 s";
    guard.close();
    child.reset();
    if (make && !o.start_failed) {  // the starter made it and let it go: the test's to remove
      if (auto made = driver_->open(make->name)) cgroup_ = std::move(*made);
    }
    cgroup_.reset();  // killed and removed (the reaper is none here: at once, or left and logged)
    return o;
  }

  uv_loop_t loop_{};
  bool loop_live_ = false;
  std::string parent_, dir_, workspace_;
  sandbox::Account account_;
  std::unique_ptr<sandbox::CgroupDriver> driver_;
  std::unique_ptr<sandbox::JobCgroup> cgroup_;
  sandbox::InProcessStarter in_process_;
  sandbox::JobStarter job_starter_;
};

TEST_P(SandboxedChildTest, ReportsTheExecThenTheExitOnce) {
  const Outcome o = run(box(), {"/bin/sh", "-c", "echo hi from $(id -un); exit 3"}, "/workspace");
  ASSERT_FALSE(o.start_failed) << o.start_failed->message;
  ASSERT_TRUE(o.exit);
  EXPECT_TRUE(o.execd);
  EXPECT_TRUE(o.execd_before_exit);
  EXPECT_TRUE(o.exit->setup_failure.empty()) << o.exit->setup_failure;
  EXPECT_TRUE(WIFEXITED(o.exit->wait_status));
  EXPECT_EQ(WEXITSTATUS(o.exit->wait_status), 3);
  EXPECT_EQ(o.exit->child.out, "hi from motor-job\n");
  EXPECT_FALSE(o.exit->killed_before_exec);
}

// The start steps' stamps (runner/start_steps.hpp): the job starter sends back when it read the
// request, planned, and its child's steps up to the exec, in that order and within the spawn;
// the in-process starter has no request to read, and its child (a copy, not sharing memory)
// stamps nothing the parent sees.
TEST_P(SandboxedChildTest, StampsTheStartersStepsInOrder) {
  const uint64_t before = sandbox::monotonic_ns();
  const Outcome o = run(box(), {"/bin/true"}, "/workspace");
  ASSERT_FALSE(o.start_failed) << o.start_failed->message;
  ASSERT_TRUE(o.execd);
  const sandbox::SpawnTimes& t = o.times;
  if (GetParam()) {
    EXPECT_GE(t.received_ns, before);
    EXPECT_GE(t.planned_ns, t.received_ns);
    EXPECT_GE(t.child.started, t.planned_ns);
    EXPECT_GE(t.child.mounted, t.child.started);
    EXPECT_GE(t.child.confined, t.child.mounted);
    EXPECT_GE(t.child.ready, t.child.confined);
    EXPECT_GE(t.cloned_ns, t.child.ready);
  } else {
    EXPECT_EQ(t.received_ns, 0u);
    EXPECT_EQ(t.child.started, 0u);
    EXPECT_EQ(t.child.ready, 0u);
    EXPECT_GE(t.planned_ns, before);
  }
  EXPECT_GE(t.cloned_ns, t.planned_ns);
  EXPECT_LE(t.cloned_ns, sandbox::monotonic_ns());
}

TEST_P(SandboxedChildTest, ACommandKilledBySignalIsReportedAsThatSignal) {
  // motor-init (PID 1) exits 128+9 for a command killed by SIGKILL; the primitive reports 9.
  const Outcome o = run(box(), {"/bin/sh", "-c", "kill -9 $$"}, "/workspace");
  ASSERT_TRUE(o.exit);
  EXPECT_TRUE(o.execd);
  ASSERT_TRUE(WIFSIGNALED(o.exit->wait_status)) << o.exit->wait_status;
  EXPECT_EQ(WTERMSIG(o.exit->wait_status), SIGKILL);
}

TEST_P(SandboxedChildTest, AFailingSetupIsReportedWithItsStepAndNeverAsExecd) {
  // The working directory does not exist inside the sandbox: the child fails before exec.
  const Outcome o = run(box(), {"/bin/true"}, "/workspace/missing");
  ASSERT_FALSE(o.start_failed) << o.start_failed->message;
  ASSERT_TRUE(o.exit);
  EXPECT_FALSE(o.execd);
  EXPECT_NE(o.exit->setup_failure.find("entering the working directory"), std::string::npos) << o.exit->setup_failure;
  EXPECT_TRUE(WIFEXITED(o.exit->wait_status));
  EXPECT_EQ(WEXITSTATUS(o.exit->wait_status), 127);
}

TEST_P(SandboxedChildTest, ASandboxThatCannotBePlannedFailsToStart) {
  sandbox::SandboxConfig b = box();
  b.read_only = {{dir_ + "/no-such-dir", "/ro"}};
  const Outcome o = run(b, {"/bin/true"}, "/workspace");
  ASSERT_TRUE(o.start_failed);
  EXPECT_NE(o.start_failed->message.find("the sandbox cannot be built"), std::string::npos) << o.start_failed->message;
  EXPECT_FALSE(o.exit);
}

TEST_P(SandboxedChildTest, AChildKilledBeforeExecIsNotReportedAsExecd) {
  // Through the job starter the child may already have exec'd when the starter answers (it
  // answers at exec): what is asserted is what SandboxedChild saw, a kill before it saw the
  // exec. So the command must outlive the kill either way: it never ends on its own.
  const Outcome o = run(box(), {"/bin/sh", "-c", "sleep 30; echo ran"}, "/workspace", /*kill_at_once=*/true);
  ASSERT_FALSE(o.start_failed) << o.start_failed->message;
  ASSERT_TRUE(o.exit);
  EXPECT_FALSE(o.execd);
  EXPECT_TRUE(o.exit->killed_before_exec);
  EXPECT_TRUE(o.exit->setup_failure.empty()) << o.exit->setup_failure;
  EXPECT_EQ(o.exit->child.term_signal, SIGKILL);
  EXPECT_EQ(o.exit->child.out, "");
}

INSTANTIATE_TEST_SUITE_P(Starters, SandboxedChildTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "JobStarter" : "InProcess"; });

// The job starter given the cgroup driver makes a job's cgroup itself (SpawnSpec::make_cgroup),
// as the runner asks it to: off the runner's loop.
class JobStarterMakesCgroups : public SandboxedChildTest {
 protected:
  void SetUp() override {
    SandboxedChildTest::SetUp();
    if (HasFatalFailure()) return;
    job_starter_.stop();
    auto s = job_starter_.start(&loop_, 0, driver_.get());
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_TRUE(job_starter_.makes_cgroups());
  }
  // The first of `files` that exists in one of the cgroup's directories, trimmed; "" if none.
  static std::string limit_file(const sandbox::JobCgroup& cg, std::initializer_list<const char*> files) {
    for (const auto& dir : cg.directories()) {
      for (const char* f : files) {
        std::ifstream in(dir + "/" + f);
        std::string value;
        if (in >> value) return value;
      }
    }
    return "";
  }
};

TEST_P(JobStarterMakesCgroups, TheChildRunsInTheCgroupItAskedForWithItsLimits) {
  sandbox::CgroupRequest make{"made-" + unique_marker(), {}};
  make.limits.memory_bytes = 64 << 20;
  make.limits.pids_max = 32;
  std::string memory, pids;
  bool populated = false, opened = false;
  const Outcome o = run(box(), {"/bin/sh", "-c", "sleep 1"}, "/workspace", false, &make, [&] {
    auto cg = driver_->open(make.name);
    if (!cg) return;
    opened = true;
    memory = limit_file(**cg, {"memory.limit_in_bytes", "memory.max"});
    pids = limit_file(**cg, {"pids.max"});
    auto p = (*cg)->populated();
    populated = p.ok() && *p;
    (void)(*cg)->disown();  // only looked at: the run removes it
  });
  ASSERT_FALSE(o.start_failed) << o.start_failed->message;
  ASSERT_TRUE(o.exit);
  EXPECT_TRUE(o.execd);
  ASSERT_TRUE(opened) << "no cgroup " << make.name << " while the child ran";
  EXPECT_EQ(memory, std::to_string(64 << 20));
  EXPECT_EQ(pids, "32");
  EXPECT_TRUE(populated) << "the child is not in the cgroup the starter made";
  EXPECT_TRUE(WIFEXITED(o.exit->wait_status));
}

TEST_P(JobStarterMakesCgroups, ASpawnThatFailsLeavesNoCgroupMadeForIt) {
  sandbox::SandboxConfig b = box();
  b.read_only = {{dir_ + "/no-such-dir", "/ro"}};
  const sandbox::CgroupRequest make{"made-" + unique_marker(), {}};
  const Outcome o = run(b, {"/bin/true"}, "/workspace", false, &make);
  ASSERT_TRUE(o.start_failed);
  EXPECT_NE(o.start_failed->message.find("the sandbox cannot be built"), std::string::npos) << o.start_failed->message;
  const auto names = driver_->list();
  EXPECT_EQ(std::find(names.begin(), names.end(), make.name), names.end()) << make.name << " was left";
  if (auto left = driver_->open(make.name)) cgroup_ = std::move(*left);  // removed in TearDown
}

INSTANTIATE_TEST_SUITE_P(Starters, JobStarterMakesCgroups, ::testing::Values(true),
                         [](const ::testing::TestParamInfo<bool>&) { return "JobStarter"; });

}  // namespace
}  // namespace motor::test
