// The probe that runs inside a sandbox under test: the test binary itself, bound read-only into
// the job's root and started with MOTOR_SANDBOX_PROBE=1 in its environment. It runs before
// GoogleTest's main (a static initializer), performs each check named on its command line and
// prints one "check = result" line per check, then exits. Results are "OK", an errno name
// ("ENOENT"), or a value.
//
// It also holds the table of harmless tries of every syscall the seccomp policy refuses (the way
// bubblewrap's try-syscall does): invalid arguments, so that without the filter each call fails
// with some error other than the filter's (or succeeds harmlessly in a throwaway child).
#include "integration/sandbox_probe.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace motor_sandbox_test {

namespace {

long ret(long r) { return r < 0 ? -errno : r; }
#define TRY(expr) +[]() -> long { return ret(expr); }

long clone_with(unsigned long flags) {
  // CLONE_SIGHAND without CLONE_VM is invalid: no process is ever created by these tries.
  const long r = ret(syscall(SYS_clone, flags | CLONE_SIGHAND | SIGCHLD, 0, 0, 0, 0));
  if (r == 0) _exit(0);
  return r;
}

long plain_fork() {
  const long r = ret(syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
  if (r == 0) _exit(0);
  if (r > 0) waitpid(static_cast<pid_t>(r), nullptr, 0);
  return r;
}

constexpr unsigned long kHigh = 1UL << 32;

const SyscallTry kTries[] = {
    {"add_key", Expect::kEperm, TRY(syscall(SYS_add_key, nullptr, nullptr, nullptr, 0, 0))},
    {"request_key", Expect::kEperm, TRY(syscall(SYS_request_key, nullptr, nullptr, nullptr, 0))},
    {"keyctl", Expect::kEperm, TRY(syscall(SYS_keyctl, -1, 0, 0, 0, 0))},
    {"bpf", Expect::kEperm, TRY(syscall(SYS_bpf, -1, nullptr, 0))},
    {"perf_event_open", Expect::kEperm, TRY(syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0))},
    {"userfaultfd", Expect::kEperm, TRY(syscall(SYS_userfaultfd, ~0U))},
    {"ptrace", Expect::kEperm, TRY(syscall(SYS_ptrace, 0x7fff, 0, 0, 0))},
    {"process_vm_readv", Expect::kEperm, TRY(syscall(SYS_process_vm_readv, 0, nullptr, 0, nullptr, 0, ~0UL))},
    {"process_vm_writev", Expect::kEperm, TRY(syscall(SYS_process_vm_writev, 0, nullptr, 0, nullptr, 0, ~0UL))},
    {"pidfd_getfd", Expect::kEperm, TRY(syscall(SYS_pidfd_getfd, -1, -1, 0))},
    {"kcmp", Expect::kEperm, TRY(syscall(SYS_kcmp, 0, 0, -1, 0, 0))},
    {"modify_ldt", Expect::kEperm, TRY(syscall(SYS_modify_ldt, 0, nullptr, 0))},
    {"socket(AF_VSOCK)", Expect::kEperm, TRY(syscall(SYS_socket, AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0))},
    {"socket(AF_VSOCK|1<<32)", Expect::kEperm, TRY(syscall(SYS_socket, AF_VSOCK | kHigh, SOCK_STREAM | SOCK_CLOEXEC, 0))},
    {"socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)", Expect::kEperm,
     TRY(syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT))},
    {"socket(AF_NETLINK, NETLINK_ROUTE)", Expect::kAllowed,
     TRY(syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_ROUTE))},
    {"socket(AF_UNIX)", Expect::kAllowed, TRY(syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0))},
    {"mount", Expect::kEperm, TRY(syscall(SYS_mount, nullptr, nullptr, nullptr, 0, nullptr))},
    {"umount2", Expect::kEperm, TRY(syscall(SYS_umount2, nullptr, ~0U))},
    {"pivot_root", Expect::kEperm, TRY(syscall(SYS_pivot_root, nullptr, nullptr))},
    {"chroot", Expect::kEperm, TRY(syscall(SYS_chroot, nullptr))},
    {"move_mount", Expect::kEperm, TRY(syscall(SYS_move_mount, -1, nullptr, -1, nullptr, ~0U))},
    {"open_tree", Expect::kEperm, TRY(syscall(SYS_open_tree, -1, nullptr, ~0U))},
    {"fsopen", Expect::kEperm, TRY(syscall(SYS_fsopen, nullptr, ~0U))},
    {"fsconfig", Expect::kEperm, TRY(syscall(SYS_fsconfig, -1, ~0U, nullptr, nullptr, 0))},
    {"fsmount", Expect::kEperm, TRY(syscall(SYS_fsmount, -1, ~0U, ~0U))},
    {"fspick", Expect::kEperm, TRY(syscall(SYS_fspick, -1, nullptr, ~0U))},
    {"mount_setattr", Expect::kEperm, TRY(syscall(SYS_mount_setattr, -1, nullptr, ~0U, nullptr, 0))},
    {"open_tree_attr", Expect::kEperm, TRY(syscall(467, -1, nullptr, ~0U, nullptr, 0))},
    {"unshare", Expect::kEperm, TRY(syscall(SYS_unshare, CLONE_PIDFD))},
    {"setns", Expect::kEperm, TRY(syscall(SYS_setns, -1, 0))},
    {"clone(CLONE_NEWNS)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWNS); }},
    {"clone(CLONE_NEWCGROUP)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWCGROUP); }},
    {"clone(CLONE_NEWUTS)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWUTS); }},
    {"clone(CLONE_NEWIPC)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWIPC); }},
    {"clone(CLONE_NEWUSER)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWUSER); }},
    {"clone(CLONE_NEWPID)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWPID); }},
    {"clone(CLONE_NEWNET)", Expect::kEperm, +[]() -> long { return clone_with(CLONE_NEWNET); }},
    {"clone(plain fork)", Expect::kAllowed, plain_fork},
    {"clone3", Expect::kEnosys, TRY(syscall(SYS_clone3, nullptr, 0))},
    {"kexec_load", Expect::kEperm, TRY(syscall(SYS_kexec_load, 0, 0, nullptr, ~0UL))},
    {"kexec_file_load", Expect::kEperm, TRY(syscall(SYS_kexec_file_load, -1, -1, 0, nullptr, ~0UL))},
    {"init_module", Expect::kEperm, TRY(syscall(SYS_init_module, nullptr, 0, nullptr))},
    {"finit_module", Expect::kEperm, TRY(syscall(SYS_finit_module, -1, nullptr, ~0U))},
    {"delete_module", Expect::kEperm, TRY(syscall(SYS_delete_module, nullptr, 0))},
    {"open_by_handle_at", Expect::kEperm, TRY(syscall(SYS_open_by_handle_at, -1, nullptr, 0))},
    {"swapon", Expect::kEperm, TRY(syscall(SYS_swapon, nullptr, 0))},
    {"swapoff", Expect::kEperm, TRY(syscall(SYS_swapoff, nullptr))},
    {"reboot", Expect::kEperm, TRY(syscall(SYS_reboot, 0, 0, 0, nullptr))},
    {"acct", Expect::kEperm, TRY(syscall(SYS_acct, ""))},
    {"quotactl", Expect::kEperm, TRY(syscall(SYS_quotactl, 0, nullptr, 0, nullptr))},
    {"quotactl_fd", Expect::kEperm, TRY(syscall(SYS_quotactl_fd, -1, 0, 0, nullptr))},
    {"iopl", Expect::kEperm, TRY(syscall(SYS_iopl, 4))},
    {"ioperm", Expect::kEperm, TRY(syscall(SYS_ioperm, 65536, 1, 1))},
    {"ioctl(TIOCSTI)", Expect::kEperm, TRY(syscall(SYS_ioctl, -1, TIOCSTI, nullptr))},
    {"ioctl(TIOCSTI|1<<32)", Expect::kEperm, TRY(syscall(SYS_ioctl, -1, TIOCSTI | kHigh, nullptr))},
    {"ioctl(TIOCLINUX)", Expect::kEperm, TRY(syscall(SYS_ioctl, -1, TIOCLINUX, nullptr))},
    {"ioctl(FIONREAD)", Expect::kAllowed, TRY(syscall(SYS_ioctl, -1, FIONREAD, nullptr))},
    {"io_uring_setup", Expect::kEperm, TRY(syscall(SYS_io_uring_setup, 0, nullptr))},
    {"io_uring_enter", Expect::kEperm, TRY(syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0))},
    {"io_uring_register", Expect::kEperm, TRY(syscall(SYS_io_uring_register, -1, 0, nullptr, 0))},
    {"personality(PER_LINUX32)", Expect::kEperm, TRY(syscall(SYS_personality, 0x0008UL))},
    {"personality(ADDR_NO_RANDOMIZE)", Expect::kEperm, TRY(syscall(SYS_personality, 0x0040000UL))},
    {"personality(PER_LINUX|1<<32)", Expect::kEperm, TRY(syscall(SYS_personality, kHigh))},
    {"personality(query)", Expect::kAllowed, TRY(syscall(SYS_personality, 0xffffffffUL))},
    {"personality(PER_LINUX)", Expect::kAllowed, TRY(syscall(SYS_personality, 0UL))},
};

#undef TRY

}  // namespace

std::span<const SyscallTry> syscall_tries() { return kTries; }

// Runs one try in a throwaway child (a try may change the persona, or in a broken sandbox even
// succeed) and returns its result: >= 0 or -errno; -1000 - signal if the child died.
long run_try_in_child(const SyscallTry& t, void (*before)()) {
  int fds[2];
  if (pipe(fds) != 0) return -errno;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (before) before();
    long r = t.call();
    if (write(fds[1], &r, sizeof r) != sizeof r) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  long r = 0;
  const ssize_t n = read(fds[0], &r, sizeof r);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != sizeof r) return WIFSIGNALED(status) ? -1000 - WTERMSIG(status) : -999;
  return r;
}

std::string describe(long r) {
  if (r <= -1000) return std::string("killed by ") + sigabbrev_np(static_cast<int>(-r - 1000));
  if (r < 0) {
    const char* name = strerrorname_np(static_cast<int>(-r));
    return name ? name : "E?" + std::to_string(-r);
  }
  return "ret " + std::to_string(r);
}

namespace {

std::string err_name(int e) {
  const char* name = strerrorname_np(e);
  return name ? name : "E" + std::to_string(e);
}

std::string result(int rc) { return rc == 0 ? "OK" : err_name(errno); }

std::string status_field(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::string v = line.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "missing";
}

std::vector<std::string> list_dir(const char* path) {
  std::vector<std::string> names;
  DIR* d = opendir(path);
  if (!d) return {err_name(errno)};
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string check_pids() {
  std::vector<std::string> out;
  for (const std::string& name : list_dir("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm("/proc/" + name + "/comm");
    std::string c;
    std::getline(comm, c);
    out.push_back(name + ":" + c);
  }
  return join(out);
}

// Mount points of /proc/self/mountinfo, sorted, with "(ro)" on read-only ones.
std::string check_mounts() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::vector<std::string> points;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, devno, root, point, options;
    f >> id >> parent >> devno >> root >> point >> options;
    const bool ro = ("," + options + ",").find(",ro,") != std::string::npos;
    points.push_back(point + (ro ? "(ro)" : ""));
  }
  std::sort(points.begin(), points.end());
  return join(points);
}

std::string check_fds() {
  std::vector<std::string> fds;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return err_name(errno);
  const int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) == own) continue;
    fds.push_back(e->d_name);
  }
  closedir(d);
  std::sort(fds.begin(), fds.end());
  return join(fds);
}

std::string check_connect(int port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return err_name(errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const std::string r = result(rc);
  close(s);
  return r;
}

std::string check_loopback() {
  const int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string r = "listen " + err_name(errno);
    close(l);
    return r;
  }
  const std::string r = check_connect(ntohs(a.sin_port));
  close(l);
  return r;
}

std::string check_net_devices() {
  std::ifstream in("/proc/net/dev");
  std::string line;
  std::vector<std::string> names;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string n = line.substr(0, colon);
    n.erase(0, n.find_first_not_of(' '));
    names.push_back(n);
  }
  return join(names);
}

std::string check_tiocsti() {
  const int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) return "ptmx " + err_name(errno);
  char name[64];
  if (unlockpt(m) != 0 || ptsname_r(m, name, sizeof name) != 0) return "pts " + err_name(errno);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    const int s = open(name, O_RDWR);  // a session leader's first tty: its controlling terminal
    if (s < 0) _exit(200);
    char c = 'x';
    if (syscall(SYS_ioctl, s, TIOCSTI, &c) == 0) _exit(0);
    _exit(errno);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(m);
  if (!WIFEXITED(status)) return "child died";
  if (WEXITSTATUS(status) == 200) return "open slave failed";
  return WEXITSTATUS(status) == 0 ? "OK" : err_name(WEXITSTATUS(status));
}

std::string check_x32() {
  const pid_t pid = fork();
  if (pid == 0) {
    syscall(0x40000000 | SYS_getpid);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return std::string("killed by ") + sigabbrev_np(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

std::string check_tmpfill(long bytes) {
  const int fd = open("/tmp/motor-probe-fill", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return err_name(errno);
  static char buf[65536];
  long done = 0;
  std::string r = "OK";
  while (done < bytes) {
    const ssize_t n = write(fd, buf, sizeof buf);
    if (n < 0) {
      r = err_name(errno);
      break;
    }
    done += n;
  }
  close(fd);
  unlink("/tmp/motor-probe-fill");
  return r;
}

// An orphan that exits after its parent: init must reap it. Result: "0" once the orphan is gone
// from /proc, or the number of zombies still there after 5 s.
std::string check_orphans() {
  int fds[2];
  if (pipe(fds) != 0) return err_name(errno);
  const pid_t mid = fork();
  if (mid == 0) {
    const pid_t orphan = fork();
    if (orphan == 0) {
      usleep(100 * 1000);
      _exit(0);  // by now its parent is gone: it is init's to reap
    }
    if (write(fds[1], &orphan, sizeof orphan) != sizeof orphan) _exit(1);
    _exit(0);
  }
  pid_t orphan = -1;
  if (read(fds[0], &orphan, sizeof orphan) != sizeof orphan) return "no orphan";
  close(fds[0]);
  close(fds[1]);
  waitpid(mid, nullptr, 0);
  int zombies = 0;
  for (int round = 0; round < 100; ++round) {
    usleep(50 * 1000);
    zombies = 0;
    for (const std::string& name : list_dir("/proc")) {
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat("/proc/" + name + "/stat");
      std::string s;
      std::getline(stat, s);
      const auto paren = s.rfind(')');
      if (paren != std::string::npos && paren + 2 < s.size() && s[paren + 2] == 'Z') ++zombies;
    }
    struct stat st {};
    if (zombies == 0 && stat(("/proc/" + std::to_string(orphan)).c_str(), &st) != 0) return "0";
  }
  return std::to_string(zombies);
}

volatile sig_atomic_t g_signal = 0;

int wait_for_term() {
  struct sigaction sa {};
  sa.sa_handler = [](int sig) { g_signal = sig; };
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("ready = 1\n");
  std::fflush(stdout);
  for (int i = 0; i < 300 && !g_signal; ++i) usleep(100 * 1000);
  std::printf("got = %s\n", g_signal ? sigabbrev_np(g_signal) : "nothing");
  std::fflush(stdout);
  return g_signal ? 7 : 1;
}

std::string run_check(const std::string& check) {
  const auto colon = check.find(':');
  const std::string verb = check.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : check.substr(colon + 1);
  if (verb == "read") {
    const int fd = open(arg.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) close(fd);
    return result(fd < 0 ? -1 : 0);
  }
  if (verb == "stat") {
    struct stat st {};
    return result(lstat(arg.c_str(), &st));
  }
  if (verb == "write") {
    const std::string path = arg + "/motor-probe-write";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      close(fd);
      unlink(path.c_str());
    }
    return result(fd < 0 ? -1 : 0);
  }
  if (verb == "mknod") return result(mknod(arg.c_str(), S_IFCHR | 0666, makedev(1, 3)));
  if (verb == "status") return status_field(arg);
  if (verb == "hostname") {
    utsname u{};
    uname(&u);
    return u.nodename;
  }
  if (verb == "readlink") {
    char buf[4096];
    const ssize_t n = readlink(arg.c_str(), buf, sizeof buf - 1);
    return n < 0 ? err_name(errno) : std::string(buf, static_cast<size_t>(n));
  }
  if (verb == "ls") return join(list_dir(arg.c_str()));
  if (verb == "pids") return check_pids();
  if (verb == "fds") return check_fds();
  if (verb == "mounts") return check_mounts();
  if (verb == "connect") return check_connect(std::atoi(arg.c_str()));
  if (verb == "loopback") return check_loopback();
  if (verb == "netdevs") return check_net_devices();
  if (verb == "tiocsti") return check_tiocsti();
  if (verb == "x32") return check_x32();
  if (verb == "tmpfill") return check_tmpfill(std::atol(arg.c_str()));
  if (verb == "orphans") return check_orphans();
  if (verb == "syscall") {
    for (const SyscallTry& t : kTries) {
      if (arg == t.name) return describe(run_try_in_child(t, nullptr));
    }
    return "unknown";
  }
  return "unknown check";
}

int probe_main() {
  std::vector<std::string> args;
  {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);  // closed before the checks run
    std::string arg;
    while (std::getline(in, arg, '\0')) args.push_back(arg);
  }
  if (args.size() >= 2 && args[1] == "wait-term") return wait_for_term();
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "syscalls") {
      for (const SyscallTry& t : kTries)
        std::printf("syscall:%s = %s\n", t.name, describe(run_try_in_child(t, nullptr)).c_str());
      continue;
    }
    std::printf("%s = %s\n", args[i].c_str(), run_check(args[i]).c_str());
  }
  std::fflush(stdout);
  return 0;
}

// Before GoogleTest's main: in probe mode, run the checks and leave.
const int g_probe_dispatch = [] {
  const char* mode = std::getenv("MOTOR_SANDBOX_PROBE");
  if (mode && std::strcmp(mode, "1") == 0) _exit(probe_main());
  return 0;
}();

}  // namespace

}  // namespace motor_sandbox_test
