// The systems the capacity bench drives: motor over its socket, bwrap and podman as processes.
#include "capacity_peers.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <simdjson.h>

#include "capacity_host.hpp"
#include "support/runner_harness.hpp"

extern char** environ;

namespace motor::bench::capacity {

using motor::test::RawClient;
using motor::test::read_file;

// --- motor ---------------------------------------------------------------------------------
static std::string motor_request(size_t kind, int id) {
  const JobKind& k = kKinds[kind];
  std::string memory = k.memory ? fmt::format(R"(,"memory":"{}")", k.memory) : "";
  return fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"{}","timeout":600{}}}}})", id,
                     json_escape(job_command(kind)), memory);
}

JobResult motor_job(const std::string& socket, size_t kind, int id, Clock::time_point deadline,
                    std::atomic<int>& running) {
  JobResult r;
  r.kind = kind;
  simdjson::dom::parser parser;
  RawClient c(socket);
  if (!c.connected()) {
    r.failure = "connect_failed";
    return r;
  }
  const auto t0 = Clock::now();
  auto ms_since = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  if (!c.send_frame(motor_request(kind, id))) {
    r.failure = "send_failed";
    return r;
  }
  bool counted = false;
  auto uncount = [&] {
    if (counted) --running;
    counted = false;
  };
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(600000));
    if (!f) {
      uncount();
      r.failure = "connection_lost";
      return r;
    }
    simdjson::dom::element root;
    if (parser.parse(*f).get(root)) {
      uncount();
      r.failure = "invalid_record";
      return r;
    }
    std::string_view type;
    if (root["type"].get_string().get(type)) {
      std::string_view code;
      if (!root.at_pointer("/error/code").get_string().get(code)) {
        uncount();
        r.failure = std::string(code);
        return r;
      }
      continue;  // a reply without a type and without an error: skip
    }
    if (type == "started") {
      r.start_ms = ms_since();
      int64_t wait = 0;
      if (!root["queue_wait_ms"].get_int64().get(wait)) r.queue_wait_ms = static_cast<double>(wait);
      ++running;
      counted = true;
    } else if (type == "output") {
      if (std::isnan(r.first_ms)) r.first_ms = ms_since();
    } else if (type == "terminal") {
      r.wall_ms = ms_since();
      r.in_window = Clock::now() <= deadline;
      uncount();
      std::string_view outcome;
      if (root.at_pointer("/outcome/type").get_string().get(outcome)) outcome = "unknown";
      int64_t code = -1;
      if (outcome == "exit" && !root.at_pointer("/outcome/code").get_int64().get(code) && code == 0) {
        r.ok = true;
      } else if (outcome == "refused_before_start") {
        std::string_view reason;
        if (root.at_pointer("/outcome/reason").get_string().get(reason)) reason = "unknown";
        r.failure = std::string(reason);
      } else {
        r.failure = outcome == "exit" ? fmt::format("exit_{}", code) : std::string(outcome);
      }
      return r;
    }
  }
}

// --- peers: a process whose stdout+stderr is one pipe -------------------------------------
JobResult spawn_job(const Spawn& s, size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
  JobResult r;
  r.kind = kind;
  std::vector<char*> args;
  for (const auto& a : s.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) {
    r.failure = "pipe_failed";
    return r;
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto t0 = Clock::now();
  // fork in a threaded program: the child only makes async-signal-safe calls before exec.
  const pid_t pid = fork();
  if (pid == 0) {
    if (s.cgroup_procs_fd >= 0 && write(s.cgroup_procs_fd, "0", 1) != 1) _exit(126);
    dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), environ);
    _exit(127);
  }
  close(fds[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(fds[0]);
    r.failure = "fork_failed";
    return r;
  }
  auto ms_since = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  bool counted = false;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      if (!counted && std::isnan(r.first_ms)) {
        r.first_ms = ms_since();
        ++running;
        counted = true;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.wall_ms = ms_since();
  r.in_window = Clock::now() <= deadline;
  if (counted) --running;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.ok = true;
  } else {
    r.failure = WIFEXITED(status) ? fmt::format("exit_{}", WEXITSTATUS(status))
                                  : fmt::format("signal_{}", WTERMSIG(status));
  }
  return r;
}

static bool is_symlink(const char* path) {
  struct stat st{};
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

std::vector<std::string> bwrap_argv(const std::string& command) {
  std::vector<std::string> a{"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session",
                             "--cap-drop",     "ALL",           "--ro-bind",         "/usr",
                             "/usr"};
  for (const char* link : {"/bin", "/lib", "/lib64", "/sbin"}) {
    if (!is_symlink(link)) continue;
    char target[256];
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) a.insert(a.end(), {"--symlink", std::string(target, static_cast<size_t>(n)), link});
  }
  a.insert(a.end(), {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--chdir", "/tmp", "/bin/sh", "-c", command});
  return a;
}

PeerCgroups::PeerCgroups() {
  const std::string name = fmt::format("motor-bench-capacity-{}", getpid());
  if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0) {
    parent_ = "/sys/fs/cgroup/memory/" + name;
    v1_ = true;
  } else if (read_file("/sys/fs/cgroup/cgroup.controllers").find("memory") != std::string::npos) {
    parent_ = "/sys/fs/cgroup/" + name;
  } else {
    why_not_ = "no memory controller (cgroup v1 memory or cgroup2 memory) on this host";
    return;
  }
  if (mkdir(parent_.c_str(), 0755) < 0 && errno != EEXIST) {
    why_not_ = fmt::format("mkdir {}: {}", parent_, std::strerror(errno));
    parent_.clear();
    return;
  }
  if (!v1_) motor::test::write_file(parent_ + "/cgroup.subtree_control", "+memory");
}

PeerCgroups::~PeerCgroups() {
  if (!parent_.empty()) rmdir(parent_.c_str());
}

std::pair<std::string, int> PeerCgroups::make(int64_t bytes) {
  if (!usable()) return {"", -1};
  const std::string cg = fmt::format("{}/job-{}", parent_, next_++);
  if (mkdir(cg.c_str(), 0755) < 0) return {"", -1};
  if (v1_) {
    motor::test::write_file(cg + "/memory.limit_in_bytes", std::to_string(bytes));
    if (access((cg + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
      motor::test::write_file(cg + "/memory.memsw.limit_in_bytes", std::to_string(bytes));
    }
  } else {
    motor::test::write_file(cg + "/memory.max", std::to_string(bytes));
    motor::test::write_file(cg + "/memory.swap.max", "0");
  }
  return {cg, ::open((cg + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC)};
}

void PeerCgroups::remove(const std::string& cg) {
  for (int i = 0; i < 200 && rmdir(cg.c_str()) < 0 && errno == EBUSY; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

JobResult bwrap_job(PeerCgroups& cgroups, size_t kind, Clock::time_point deadline, std::atomic<int>& running) {
  Spawn s{bwrap_argv(job_command(kind)), -1};
  std::string cg;
  if (kKinds[kind].memory) std::tie(cg, s.cgroup_procs_fd) = cgroups.make(kMemcapBytes);
  JobResult r = spawn_job(s, kind, deadline, running);
  if (s.cgroup_procs_fd >= 0) close(s.cgroup_procs_fd);
  if (!cg.empty()) PeerCgroups::remove(cg);
  return r;
}

PodmanRoot::PodmanRoot() {
  char tmpl[] = "/tmp/motor-bench-rootfs-XXXXXX";
  if (const char* d = mkdtemp(tmpl)) dir_ = d;
  if (dir_.empty()) return;
  chmod(dir_.c_str(), 0755);
  for (const char* sub : {"usr", "etc", "tmp", "proc", "dev", "sys", "run", "root"}) {
    mkdir((dir_ + "/" + sub).c_str(), 0755);
  }
  chmod((dir_ + "/tmp").c_str(), 01777);
  for (const char* link : {"bin", "lib", "lib64", "sbin"}) {
    const std::string host = std::string("/") + link;
    char target[256];
    const ssize_t n = readlink(host.c_str(), target, sizeof target - 1);
    if (n > 0) (void)!symlink(std::string(target, static_cast<size_t>(n)).c_str(), (dir_ + host).c_str());
  }
  motor::test::write_file(dir_ + "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
  motor::test::write_file(dir_ + "/etc/group", "root:x:0:\n");
}

PodmanRoot::~PodmanRoot() { motor::test::remove_tree(dir_); }

std::vector<std::string> podman_argv(const std::string& rootfs, size_t kind) {
  std::vector<std::string> a{"/usr/bin/podman", "run",       "--rm",     "--runtime",         "runc",
                             "--ulimit",        "nofile=4096:4096",       "--ulimit",          "nproc=4096:4096",
                             "--network",       "none",      "--volume", "/usr:/usr:ro",      "--workdir",
                             "/tmp"};
  if (kKinds[kind].memory) a.insert(a.end(), {"--memory", "256m", "--memory-swap", "256m"});
  a.insert(a.end(), {"--rootfs", rootfs, "/bin/sh", "-c", job_command(kind)});
  return a;
}

bool run_ok(const std::vector<std::string>& argv, std::string* why) {
  auto r = motor::test::run_program(argv, {}, std::chrono::seconds(120));
  if (r.exit_code == 0) return true;
  std::string text = trim(r.err.empty() ? r.out : r.err);
  if (const size_t nl = text.rfind('\n'); nl != std::string::npos) text = text.substr(nl + 1);
  *why = fmt::format("exit {}: {}", r.exit_code, text.substr(0, 300));
  return false;
}

}  // namespace motor::bench::capacity
