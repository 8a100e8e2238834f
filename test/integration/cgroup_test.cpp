// Job cgroups against the real kernel (root only): limits land in the control files, kill_all()
// ends a whole tree (including a setsid'ed, SIGTERM-ignoring double-forked grandchild), memory
// and pids limits bite, and everything we create is removed. Runs for the detected layout (kAuto)
// and for forced pure v1, whose kill path (freeze, SIGKILL, thaw) differs.
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/cgroup.hpp"

namespace motor::sandbox {
// Readable parameter names in gtest output.
inline void PrintTo(CgroupPreference p, std::ostream* os) {
  *os << (p == CgroupPreference::kAuto ? "kAuto" : p == CgroupPreference::kV1 ? "kV1" : "kV2");
}
}  // namespace motor::sandbox

namespace {

using motor::sandbox::CgroupDriver;
using motor::sandbox::CgroupLimits;
using motor::sandbox::CgroupPreference;
using motor::sandbox::detect_cgroups;
using motor::sandbox::JobCgroup;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool in_ci() {
  const char* v = std::getenv("CI");
  return v != nullptr && std::string(v) == "true";
}

// A missing kernel feature skips locally but fails under CI=true.
#define SKIP_OR_FAIL(msg)                                         \
  do {                                                            \
    if (in_ci()) {                                                \
      FAIL() << "CI=true, so not skipping: " << msg;              \
    } else {                                                      \
      GTEST_SKIP() << msg;                                        \
    }                                                             \
  } while (0)

const char* pref_name(CgroupPreference p) {
  switch (p) {
    case CgroupPreference::kAuto: return "auto";
    case CgroupPreference::kV1: return "v1";
    case CgroupPreference::kV2: return "v2";
  }
  return "?";
}

std::string unique_parent() {
  static int counter = 0;
  return "motor-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

bool path_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> glob_dirs(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

// Every directory named `parent` in any cgroup hierarchy (pure v2 at the root, or per controller).
std::vector<std::string> parent_dirs(const std::string& parent) {
  auto out = glob_dirs("/sys/fs/cgroup/*/" + parent);
  if (path_exists("/sys/fs/cgroup/" + parent)) out.push_back("/sys/fs/cgroup/" + parent);
  return out;
}

// Last-resort clean-up of everything under our test parents, whatever the code under test did:
// only ever touches directories named after this test's own unique parent.
void brute_force_cleanup(const std::string& parent) {
  for (int round = 0; round < 50; ++round) {
    bool left = false;
    for (const auto& p : parent_dirs(parent)) {
      for (const auto& job : glob_dirs(p + "/*")) {
        if (path_exists(job + "/cgroup.kill")) std::ofstream(job + "/cgroup.kill") << "1";
        if (path_exists(job + "/freezer.state")) std::ofstream(job + "/freezer.state") << "THAWED";
        std::ifstream procs(job + "/cgroup.procs");
        pid_t pid;
        while (procs >> pid) ::kill(pid, SIGKILL);
        if (::rmdir(job.c_str()) != 0 && errno != ENOENT) left = true;
      }
      if (::rmdir(p.c_str()) != 0 && errno != ENOENT) left = true;
    }
    if (!left) return;
    std::this_thread::sleep_for(20ms);
  }
}

void reap_all_zombies() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// clone3(2) arguments (struct clone_args, version 2 with the cgroup field).
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;

// Starts a child in `cg` the way spawn does: clone3(CLONE_INTO_CGROUP) where the layout has a
// cgroup2 directory, then "0" into each v1 cgroup.procs. The child runs `body` and _exits.
template <typename Body>
pid_t start_in_cgroup(const JobCgroup& cg, Body body) {
  pid_t pid;
  if (cg.clone_into_fd() >= 0) {
    CloneArgs args{};
    args.flags = kCloneIntoCgroup;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<uint64_t>(cg.clone_into_fd());
    pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  } else {
    pid = ::fork();
  }
  if (pid != 0) return pid;  // parent (or -1)
  for (int fd : cg.child_attach_fds())
    if (::write(fd, "0", 1) != 1) ::_exit(120);
  body();
  ::_exit(0);
}

// 256 MiB of written anonymous memory in `cg`: exits 0 only if no limit stopped it.
pid_t start_balloon(const JobCgroup& cg) {
  return start_in_cgroup(cg, [] {
    constexpr size_t kSize = 256u << 20;
    auto* p = static_cast<volatile char*>(std::malloc(kSize));
    if (p == nullptr) ::_exit(3);
    for (size_t i = 0; i < kSize; i += 4096) p[i] = 1;
    ::_exit(0);  // reaching here means the limit did not hold
  });
}

void report_pid(int fd) {
  pid_t me = ::getpid();
  if (::write(fd, &me, sizeof me) != sizeof me) ::_exit(121);
}

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

// Reads `count` pid_t values from `fd`, waiting at most `limit` in total.
std::vector<pid_t> read_pids(int fd, size_t count, std::chrono::milliseconds limit) {
  std::vector<pid_t> out;
  const auto deadline = Clock::now() + limit;
  while (out.size() < count && Clock::now() < deadline) {
    struct pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    pid_t pid;
    ssize_t n = ::read(fd, &pid, sizeof pid);
    if (n == sizeof pid) out.push_back(pid);
    if (n == 0) break;
  }
  return out;
}

// Starts `body(report_fd)` in `cg` (start_in_cgroup) and reads the `count` pids its processes
// report from inside the cgroup (report_pid), waiting at most 5 s: the child (<= 0 if it could
// not start) and the pids read.
struct Reported {
  pid_t child = -1;
  std::vector<pid_t> pids;
};
template <typename Body>
Reported start_reporting(const JobCgroup& cg, size_t count, Body body) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {};
  const int wr = report[1];
  Reported out;
  out.child = start_in_cgroup(cg, [wr, &body] { body(wr); });
  ::close(report[1]);
  if (out.child > 0) out.pids = read_pids(report[0], count, 5000ms);
  ::close(report[0]);
  return out;
}

// Waits for a direct child to exit, at most `limit`. Returns its status, or -1 on timeout.
int wait_child(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 || Clock::now() > deadline) return -1;
    std::this_thread::sleep_for(5ms);
  }
}

bool wait_unpopulated(const JobCgroup& cg, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    auto p = cg.populated();
    if (p.ok() && !*p) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// The first of the job's directories that holds `file`, or "".
std::string find_control(const JobCgroup& cg, const std::string& file) {
  for (const auto& d : cg.directories())
    if (path_exists(d + "/" + file)) return d + "/" + file;
  return "";
}

class CgroupJobTest : public ::testing::TestWithParam<CgroupPreference> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) SKIP_OR_FAIL("cgroup tests need root");
    parent_ = unique_parent();
    auto d = detect_cgroups(parent_, GetParam());
    if (!d.ok()) SKIP_OR_FAIL("cgroup layout '" << pref_name(GetParam()) << "' unavailable: " << d.error().message);
    driver_ = std::move(*d);
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphans of the job tree come back to us
    subreaper_ = true;
    std::cout << "[ layout ] " << pref_name(GetParam()) << " -> " << driver_->layout() << "\n";
  }

  void TearDown() override {
    for (auto& job : jobs_) {
      if (!job) continue;
      auto pop = job->populated();
      if (!pop.ok()) continue;  // already removed by the test
      if (*pop) {
        (void)job->kill_all();
        wait_unpopulated(*job, 5000ms);
      }
      (void)job->remove();
    }
    jobs_.clear();
    driver_.reset();
    if (!parent_.empty()) {
      brute_force_cleanup(parent_);
      EXPECT_TRUE(parent_dirs(parent_).empty()) << "left behind: " << parent_dirs(parent_).front();
    }
    reap_all_zombies();
    if (subreaper_) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  }

  std::string expected_layout() const {
    return GetParam() == CgroupPreference::kV1 ? "v1" : GetParam() == CgroupPreference::kV2 ? "v2" : "";
  }

  std::string parent_;
  std::unique_ptr<CgroupDriver> driver_;
  std::vector<std::unique_ptr<JobCgroup>> jobs_;
  bool subreaper_ = false;
};

TEST_P(CgroupJobTest, LimitsLandInControlFiles) {
  if (!expected_layout().empty()) {
    EXPECT_EQ(driver_->layout(), expected_layout());
  }
  CgroupLimits limits;
  limits.memory_bytes = 64LL << 20;
  limits.pids_max = 16;
  limits.cpus = "0";
  auto made = driver_->create("job-limits", limits);
  ASSERT_TRUE(made.ok()) << made.error().message;
  jobs_.push_back(std::move(*made));
  JobCgroup& job = *jobs_.back();
  EXPECT_EQ(job.name(), "job-limits");

  const std::string mem = std::to_string(64LL << 20);
  if (driver_->layout() == "v2") {
    EXPECT_EQ(slurp(find_control(job, "memory.max")), mem);
    if (!find_control(job, "memory.swap.max").empty()) {
      EXPECT_EQ(slurp(find_control(job, "memory.swap.max")), "0");
    }
    EXPECT_GE(job.clone_into_fd(), 0);
    EXPECT_TRUE(job.child_attach_fds().empty());
  } else {
    EXPECT_EQ(slurp(find_control(job, "memory.limit_in_bytes")), mem);
    if (!find_control(job, "memory.memsw.limit_in_bytes").empty()) {
      EXPECT_EQ(slurp(find_control(job, "memory.memsw.limit_in_bytes")), mem);
    }
    EXPECT_FALSE(job.child_attach_fds().empty());
    if (driver_->layout() == "v1") {
      EXPECT_EQ(job.clone_into_fd(), -1);
      EXPECT_EQ(job.events_path(), "");
      EXPECT_FALSE(find_control(job, "freezer.state").empty());
    } else {
      EXPECT_GE(job.clone_into_fd(), 0);
      EXPECT_TRUE(path_exists(job.events_path())) << job.events_path();
    }
  }
  EXPECT_EQ(slurp(find_control(job, "pids.max")), "16");
  EXPECT_EQ(slurp(find_control(job, "cpuset.cpus")), "0");

  auto names = driver_->list();
  EXPECT_NE(std::find(names.begin(), names.end(), "job-limits"), names.end());
  auto pop = job.populated();
  ASSERT_TRUE(pop.ok()) << pop.error().message;
  EXPECT_FALSE(*pop);
  EXPECT_FALSE(job.oom_killed());

  // A second job of the same name is refused rather than adopted.
  EXPECT_FALSE(driver_->create("job-limits", limits).ok());
  EXPECT_FALSE(driver_->create("../escape", limits).ok());
  EXPECT_FALSE(driver_->create("", limits).ok());

  auto dirs = job.directories();
  ASSERT_FALSE(dirs.empty());
  auto st = job.remove();
  ASSERT_TRUE(st.ok()) << st.error().message;
  for (const auto& d : dirs) EXPECT_FALSE(path_exists(d)) << d;
  names = driver_->list();
  EXPECT_EQ(std::find(names.begin(), names.end(), "job-limits"), names.end());
}

TEST_P(CgroupJobTest, KillAllEndsTheWholeTree) {
  CgroupLimits limits;
  limits.memory_bytes = 256LL << 20;
  limits.pids_max = 200;
  auto made = driver_->create("job-kill", limits);
  ASSERT_TRUE(made.ok()) << made.error().message;
  jobs_.push_back(std::move(*made));
  JobCgroup& job = *jobs_.back();

  constexpr int kSleepers = 20;
  auto [child, pids] = start_reporting(job, 2 + kSleepers, [](int wr) {
    report_pid(wr);
    // A grandchild that leaves the session, ignores SIGTERM and double-forks away from us.
    pid_t g = ::fork();
    if (g == 0) {
      ::setsid();
      ::signal(SIGTERM, SIG_IGN);
      pid_t gg = ::fork();
      if (gg == 0) {
        ::setsid();
        ::signal(SIGTERM, SIG_IGN);
        report_pid(wr);
        sleep_forever();
      }
      ::_exit(0);
    }
    for (int i = 0; i < kSleepers; ++i) {
      if (::fork() == 0) {
        report_pid(wr);
        sleep_forever();
      }
    }
    sleep_forever();
  });
  ASSERT_GT(child, 0) << std::strerror(errno);
  ASSERT_EQ(pids.size(), static_cast<size_t>(2 + kSleepers)) << "the tree did not start";
  for (pid_t p : pids) EXPECT_EQ(::kill(p, 0), 0) << "pid " << p << " should be alive";

  auto pop = job.populated();
  ASSERT_TRUE(pop.ok()) << pop.error().message;
  EXPECT_TRUE(*pop);
  if (!job.events_path().empty()) {
    EXPECT_NE(slurp(job.events_path()).find("populated 1"), std::string::npos);
  }

  // remove() refuses, quickly, while the tree lives.
  const auto before_remove = Clock::now();
  EXPECT_FALSE(job.remove().ok());
  EXPECT_LT(Clock::now() - before_remove, 500ms);
  for (const auto& d : job.directories()) EXPECT_TRUE(path_exists(d)) << d;

  auto st = job.kill_all();
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(wait_unpopulated(job, 5000ms)) << "cgroup still populated 5 s after kill_all()";

  int status = wait_child(child, 2000ms);
  ASSERT_NE(status, -1) << "direct child not dead";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  std::this_thread::sleep_for(20ms);
  reap_all_zombies();  // orphans of the tree were reparented to us (subreaper)
  for (pid_t p : pids) {
    errno = 0;
    EXPECT_EQ(::kill(p, 0), -1) << "pid " << p << " survived kill_all()";
    EXPECT_EQ(errno, ESRCH) << "pid " << p;
  }

  auto dirs = job.directories();
  st = job.remove();
  ASSERT_TRUE(st.ok()) << st.error().message;
  for (const auto& d : dirs) EXPECT_FALSE(path_exists(d)) << d;
}

TEST_P(CgroupJobTest, ReopenAfterRestartKillsAndRemoves) {
  auto made = driver_->create("job-reopen", CgroupLimits{});
  ASSERT_TRUE(made.ok()) << made.error().message;
  auto [child, pids] = start_reporting(**made, 4, [](int wr) {
    for (int i = 0; i < 3; ++i)
      if (::fork() == 0) {
        report_pid(wr);
        sleep_forever();
      }
    report_pid(wr);
    sleep_forever();
  });
  ASSERT_GT(child, 0);
  ASSERT_EQ(pids.size(), 4u);
  (void)(*made)->disown();
  made->reset();  // the "runner" dies; the cgroup and its processes stay

  auto again = detect_cgroups(parent_, GetParam());
  ASSERT_TRUE(again.ok()) << again.error().message;
  auto names = (*again)->list();
  ASSERT_NE(std::find(names.begin(), names.end(), "job-reopen"), names.end());
  auto opened = (*again)->open("job-reopen");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  jobs_.push_back(std::move(*opened));
  JobCgroup& job = *jobs_.back();
  auto pop = job.populated();
  ASSERT_TRUE(pop.ok()) << pop.error().message;
  EXPECT_TRUE(*pop);
  auto st = job.kill_all();
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(wait_unpopulated(job, 5000ms));
  EXPECT_NE(wait_child(child, 2000ms), -1);
  st = job.remove();
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_FALSE((*again)->open("job-reopen").ok());
}

// A cgroup made by another process (as the job starter makes a job's), taken by its name alone
// (CgroupDriver::known): the same directories as open() finds, and it kills and removes.
TEST_P(CgroupJobTest, AHandleByNameOfACgroupMadeElsewhereKillsAndRemovesIt) {
  auto elsewhere = detect_cgroups(parent_, GetParam());  // the starter's copy of the driver
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.error().message;
  auto made = (*elsewhere)->create("job-known", CgroupLimits{});
  ASSERT_TRUE(made.ok()) << made.error().message;
  auto [child, pids] = start_reporting(**made, 1, [](int wr) {
    report_pid(wr);  // in the cgroup by now (pure v1: the child attaches itself)
    sleep_forever();
  });
  ASSERT_GT(child, 0);
  ASSERT_EQ(pids.size(), 1u);
  (void)(*made)->disown();
  made->reset();
  auto known = driver_->known("job-known");
  ASSERT_TRUE(known.ok()) << known.error().message;
  jobs_.push_back(std::move(*known));
  JobCgroup& job = *jobs_.back();
  auto opened = driver_->open("job-known");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(job.directories(), (*opened)->directories());
  EXPECT_EQ(job.events_path(), (*opened)->events_path());
  (void)(*opened)->disown();
  auto pop = job.populated();
  ASSERT_TRUE(pop.ok()) << pop.error().message;
  EXPECT_TRUE(*pop);
  ASSERT_TRUE(job.kill_all().ok());
  EXPECT_TRUE(wait_unpopulated(job, 5000ms));
  EXPECT_NE(wait_child(child, 2000ms), -1);
  ASSERT_TRUE(job.remove().ok());
  EXPECT_FALSE(driver_->open("job-known").ok());
  EXPECT_FALSE(driver_->known("../escape").ok());
}

// The memory limit OOM-kills a balloon, and the live OOM watcher (v1: an eventfd registered
// through cgroup.event_control for memory.oom_control; v2: inotify on memory.events) is quiet
// before, wakes for it, and its count says so. Without the registration it never wakes.
TEST_P(CgroupJobTest, MemoryLimitOomKills) {
  CgroupLimits limits;
  limits.memory_bytes = 64LL << 20;
  auto made = driver_->create("job-oom", limits);
  ASSERT_TRUE(made.ok()) << made.error().message;
  jobs_.push_back(std::move(*made));
  JobCgroup& job = *jobs_.back();
  EXPECT_FALSE(job.oom_killed());
  auto made_watch = job.watch_oom();
  ASSERT_TRUE(made_watch.ok()) << made_watch.error().message;
  std::optional<motor::sandbox::OomWatch> watch(std::move(*made_watch));
  pollfd quiet{watch->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&quiet, 1, 0), 0) << "the watcher woke before any OOM";

  pid_t child = start_balloon(job);
  ASSERT_GT(child, 0);
  pollfd woke{watch->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&woke, 1, 30000), 1) << "no OOM notification within 30 s";
  int status = wait_child(child, 30000ms);
  ASSERT_NE(status, -1) << "balloon still running after 30 s";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "expected SIGKILL by the OOM killer; status " << status;
  EXPECT_TRUE(job.oom_killed());
  auto kills = watch->consume();
  ASSERT_TRUE(kills.ok()) << kills.error().message;
  EXPECT_GE(*kills, 1);
  pollfd drained{watch->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&drained, 1, 0), 0) << "consume() left the fd readable";
  watch.reset();  // v1 signals the eventfd on rmdir: stop watching first
  EXPECT_TRUE(wait_unpopulated(job, 5000ms));
  auto st = job.remove();
  EXPECT_TRUE(st.ok()) << st.error().message;
}

// The v2 half of the watcher is inotify IN_MODIFY on a cgroup2 flat-keyed file. This host has
// no cgroup2 memory controller (no memory.events), so the same code is driven here through
// the unified hierarchy's cgroup.events ("populated"), which the kernel updates the same way.
TEST(OomWatch, InotifyOnACgroup2KeyedFileWakesOnChange) {
  if (::geteuid() != 0) SKIP_OR_FAIL("cgroup tests need root");
  const std::string parent = unique_parent();
  struct Cleanup {
    std::string parent;
    ~Cleanup() { brute_force_cleanup(parent); }
  } cleanup{parent};
  auto d = detect_cgroups(parent, CgroupPreference::kAuto);
  ASSERT_TRUE(d.ok()) << d.error().message;
  auto made = (*d)->create("job-inotify", {});
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::string unified;
  for (const auto& dir : (*made)->directories())
    if (path_exists(dir + "/cgroup.events")) unified = dir;
  if (unified.empty()) {
    (void)(*made)->remove();
    SKIP_OR_FAIL("no cgroup2 directory for this job");
  }
  auto watch = motor::sandbox::OomWatch::on_v2_events_file(unified, "cgroup.events", "populated");
  ASSERT_TRUE(watch.ok()) << watch.error().message;
  pollfd quiet{watch->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&quiet, 1, 0), 0);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t child = start_in_cgroup(**made, [go] {
    ::close(go[1]);
    char c;
    (void)::read(go[0], &c, 1);
    ::_exit(0);
  });
  ASSERT_GT(child, 0);
  pollfd woke{watch->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&woke, 1, 10000), 1) << "no inotify event for populated 0 -> 1";
  auto value = watch->consume();
  ASSERT_TRUE(value.ok()) << value.error().message;
  EXPECT_EQ(*value, 1);
  ::close(go[1]);
  ::close(go[0]);
  EXPECT_NE(wait_child(child, 5000ms), -1);
  EXPECT_TRUE(wait_unpopulated(**made, 5000ms));
  EXPECT_TRUE((*made)->remove().ok());
}

TEST_P(CgroupJobTest, PidsLimitStopsForkLoop) {
  CgroupLimits limits;
  limits.pids_max = 16;
  auto made = driver_->create("job-pids", limits);
  ASSERT_TRUE(made.ok()) << made.error().message;
  jobs_.push_back(std::move(*made));
  JobCgroup& job = *jobs_.back();

  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const int wr = report[1];
  pid_t child = start_in_cgroup(job, [wr] {
    int forked = 0, err = 0;
    for (int i = 0; i < 100; ++i) {
      pid_t p = ::fork();
      if (p == 0) sleep_forever();
      if (p < 0) {
        err = errno;
        break;
      }
      ++forked;
    }
    int msg[2] = {forked, err};
    if (::write(wr, msg, sizeof msg) != sizeof msg) ::_exit(4);
    sleep_forever();
  });
  ::close(report[1]);
  ASSERT_GT(child, 0);
  int msg[2] = {-1, -1};
  struct pollfd p{report[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "fork loop did not report";
  ASSERT_EQ(::read(report[0], msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  ::close(report[0]);
  EXPECT_EQ(msg[1], EAGAIN) << "fork loop ended with " << std::strerror(msg[1]) << " after " << msg[0];
  EXPECT_LE(msg[0], 15) << "16 pids including the loop itself";

  auto st = job.kill_all();
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(wait_unpopulated(job, 5000ms));
  EXPECT_NE(wait_child(child, 2000ms), -1);
  st = job.remove();
  EXPECT_TRUE(st.ok()) << st.error().message;
}

INSTANTIATE_TEST_SUITE_P(Cgroup, CgroupJobTest, ::testing::Values(CgroupPreference::kAuto, CgroupPreference::kV1),
                         [](const ::testing::TestParamInfo<CgroupPreference>& param_info) {
                           return std::string(pref_name(param_info.param));
                         });

// Forcing v2 works where cgroup2 carries the controllers and otherwise fails naming them.
TEST(CgroupDetect, ForcedV2EitherWorksOrNamesMissingControllers) {
  if (::geteuid() != 0) SKIP_OR_FAIL("cgroup tests need root");
  const std::string parent = unique_parent();
  auto autod = detect_cgroups(parent, CgroupPreference::kAuto);
  if (!autod.ok()) {
    brute_force_cleanup(parent);
    SKIP_OR_FAIL("no cgroup layout: " << autod.error().message);
  }
  const std::string layout = (*autod)->layout();
  std::cout << "[ layout ] auto -> " << layout << "\n";
  auto v2 = detect_cgroups(parent, CgroupPreference::kV2);
  if (layout == "v2") {
    EXPECT_TRUE(v2.ok()) << v2.error().message;
  } else {
    ASSERT_FALSE(v2.ok());
    std::cout << "[ kV2 ] " << v2.error().message << "\n";
    EXPECT_NE(v2.error().message.find("memory"), std::string::npos) << v2.error().message;
    EXPECT_NE(v2.error().message.find("pids"), std::string::npos) << v2.error().message;
  }
  EXPECT_FALSE(detect_cgroups("bad/parent", CgroupPreference::kAuto).ok());
  EXPECT_FALSE(detect_cgroups("..", CgroupPreference::kAuto).ok());
  brute_force_cleanup(parent);
  EXPECT_TRUE(parent_dirs(parent).empty());
}

}  // namespace
