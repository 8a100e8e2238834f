#include "gate/host_checks.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <shadow.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "gate/runner_session.hpp"
#include "motor/version.hpp"

namespace motor::gate {
namespace {

std::string read_text(const std::string& path, bool* ok = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (ok) *ok = static_cast<bool>(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

HostCheck ok(std::string name, std::string detail) { return {std::move(name), CheckStatus::kOk, std::move(detail), ""}; }
HostCheck fail(std::string name, std::string detail, std::string fix) {
  return {std::move(name), CheckStatus::kFail, std::move(detail), std::move(fix)};
}
HostCheck note(std::string name, std::string detail) { return {std::move(name), CheckStatus::kNote, std::move(detail), ""}; }

// --- namespaces and seccomp ---------------------------------------------------------------------

HostCheck check_namespaces(HostFacts& facts) {
  struct Ns {
    int flag;
    const char* name;
    const char* config;
  };
  static constexpr Ns kNs[] = {{CLONE_NEWNS, "mount", "CONFIG_NAMESPACES"}, {CLONE_NEWPID, "pid", "CONFIG_PID_NS"},
                               {CLONE_NEWNET, "net", "CONFIG_NET_NS"},      {CLONE_NEWIPC, "ipc", "CONFIG_IPC_NS"},
                               {CLONE_NEWUTS, "uts", "CONFIG_UTS_NS"},      {CLONE_NEWCGROUP, "cgroup", "CONFIG_CGROUPS"}};
  std::vector<std::string> good, bad, fixes;
  for (const Ns& ns : kNs) {
    const pid_t pid = fork();
    if (pid == 0) _exit(unshare(ns.flag) == 0 ? 0 : (errno & 0xff));
    int status = 0;
    int err = -1;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) err = WEXITSTATUS(status);
    if (err == 0) {
      good.emplace_back(ns.name);
    } else {
      bad.push_back(fmt::format("{} ({})", ns.name, err > 0 ? std::strerror(err) : "child failed"));
      fixes.push_back(ns.config);
    }
  }
  facts.namespaces = bad.empty();
  if (!bad.empty()) {
    return fail("kernel namespaces", "unshare failed for: " + fmt::format("{}", fmt::join(bad, ", ")),
                "use a kernel built with " + fmt::format("{}", fmt::join(fixes, ", ")) +
                    " and run the runner as root (or with CAP_SYS_ADMIN); jobs cannot be isolated without them");
  }
  return ok("kernel namespaces", "unshare works for " + fmt::format("{}", fmt::join(good, ", ")));
}

HostCheck check_seccomp(HostFacts& facts) {
  const std::string status = read_text("/proc/self/status");
  const bool field = status.find("\nSeccomp:") != std::string::npos;
  const int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  const std::string actions = trimmed(read_text("/proc/sys/kernel/seccomp/actions_avail"));
  const bool has_errno = actions.empty() || actions.find("errno") != std::string::npos;
  facts.seccomp = field && mode >= 0 && has_errno;
  if (!facts.seccomp) {
    return fail("seccomp", fmt::format("Seccomp field in /proc/self/status: {}; PR_GET_SECCOMP: {}; actions: {}",
                                       field ? "present" : "absent", mode >= 0 ? "works" : std::strerror(errno),
                                       actions.empty() ? "(unknown)" : actions),
                "use a kernel with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER; every job loads a filter");
  }
  return ok("seccomp", "filter mode available" + (actions.empty() ? std::string() : " (actions: " + actions + ")"));
}

// --- cgroups ----------------------------------------------------------------------------------

HostCheck check_cgroups(const config::Config& config, HostFacts& facts) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::map<std::string, std::string> v1;  // controller -> mount point
  std::string v2_mount;
  std::set<std::string> v2_controllers;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    const auto dash = static_cast<size_t>(std::find(f.begin(), f.end(), "-") - f.begin());
    if (f.size() < 5 || dash + 3 >= f.size()) continue;
    const std::string& mount_point = f[4];
    const std::string& fstype = f[dash + 1];
    const std::string& super = f[dash + 3];
    if (fstype == "cgroup") {
      std::istringstream opts(super);
      for (std::string o; std::getline(opts, o, ',');) {
        if (o == "memory" || o == "pids" || o == "cpuset") v1.emplace(o, mount_point);
      }
    } else if (fstype == "cgroup2" && v2_mount.empty()) {
      v2_mount = mount_point;
      std::istringstream cs(read_text(mount_point + "/cgroup.controllers"));
      for (std::string c; cs >> c;) v2_controllers.insert(c);
    }
  }
  const bool want_v1 = config.cgroup_mode != config::CgroupMode::kV2;
  const bool want_v2 = config.cgroup_mode != config::CgroupMode::kV1;
  std::vector<std::string> found, missing;
  bool any_v1 = false, any_v2 = false;
  for (const char* c : {"memory", "pids", "cpuset"}) {
    std::string where;
    if (want_v2 && v2_controllers.count(c)) {
      where = "v2 at " + v2_mount;
      any_v2 = true;
      if (std::find(facts.cgroup_mounts.begin(), facts.cgroup_mounts.end(), v2_mount) == facts.cgroup_mounts.end()) {
        facts.cgroup_mounts.push_back(v2_mount);
      }
    } else if (want_v1 && v1.count(c)) {
      where = "v1 at " + v1[c];
      any_v1 = true;
      facts.cgroup_mounts.push_back(v1[c]);
    }
    if (where.empty()) missing.emplace_back(c);
    else found.push_back(std::string(c) + ": " + where);
    if (std::string(c) == "memory") facts.memory_controller = !where.empty();
    if (std::string(c) == "pids") facts.pids_controller = !where.empty();
    if (std::string(c) == "cpuset") facts.cpuset_controller = !where.empty();
  }
  if (!v2_mount.empty() && any_v1 && std::find(facts.cgroup_mounts.begin(), facts.cgroup_mounts.end(), v2_mount) ==
                                         facts.cgroup_mounts.end()) {
    facts.cgroup_mounts.push_back(v2_mount);  // hybrid: the runner kills and watches through cgroup2
  }
  facts.cgroup_layout = any_v1 && !v2_mount.empty() ? "hybrid" : any_v1 ? "v1" : any_v2 ? "v2" : "";
  const std::string detail = fmt::format("{}{}", fmt::join(found, "; "),
                                         facts.cgroup_layout.empty() ? "" : " (" + facts.cgroup_layout + " layout)");
  if (!missing.empty()) {
    return fail("cgroup controllers", fmt::format("missing: {}{}", fmt::join(missing, ", "), detail.empty() ? "" : "; " + detail),
                "enable the controllers (cgroup v2: add them to cgroup.subtree_control of the runner's parent; v1: mount "
                "each hierarchy under /sys/fs/cgroup), or set cgroup_mode to the layout that has them");
  }
  return ok("cgroup controllers", detail);
}

// --- accounts ---------------------------------------------------------------------------------

bool is_nologin_shell(const std::string& shell) {
  static const std::set<std::string> kNologin = {"/usr/sbin/nologin", "/sbin/nologin", "/bin/false", "/usr/bin/false"};
  return kNologin.count(shell) > 0;
}

struct AccountIds {
  std::string name;
  uid_t uid;
  gid_t gid;
};

std::vector<HostCheck> check_accounts(const config::Config& config, std::vector<AccountIds>& ids) {
  std::vector<HostCheck> out;
  for (const auto& name : service_accounts(config)) {
    const std::string label = "account " + name;
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* found = nullptr;
    if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
      out.push_back(fail(label, "does not exist",
                         fmt::format("useradd --system --no-create-home --shell /usr/sbin/nologin {}", name)));
      continue;
    }
    std::vector<std::string> problems, fixes;
    if (pw.pw_uid == 0 || pw.pw_gid == 0) {
      problems.push_back(fmt::format("privileged (uid {} gid {})", pw.pw_uid, pw.pw_gid));
      fixes.push_back("give it its own non-zero uid and group (usermod -u / -g)");
    }
    int count = 64;
    std::vector<gid_t> groups(64);
    if (getgrouplist(name.c_str(), pw.pw_gid, groups.data(), &count) >= 0) {
      groups.resize(static_cast<size_t>(count));
      if (std::find(groups.begin(), groups.end(), gid_t{0}) != groups.end()) {
        problems.emplace_back("member of group 0 (root)");
        fixes.push_back(fmt::format("gpasswd -d {} root", name));
      }
    }
    const std::string shell = pw.pw_shell ? pw.pw_shell : "";
    if (!is_nologin_shell(shell)) {
      problems.push_back("login shell " + (shell.empty() ? std::string("(empty: /bin/sh)") : shell));
      fixes.push_back(fmt::format("usermod --shell /usr/sbin/nologin {}", name));
    }
    std::string password = "unknown";
    if (spwd* sp = getspnam(name.c_str())) {
      const std::string p = sp->sp_pwdp ? sp->sp_pwdp : "";
      if (p.empty()) {
        problems.emplace_back("has an empty password");
        fixes.push_back(fmt::format("usermod --lock {}", name));
        password = "empty";
      } else {
        password = p[0] == '!' || p[0] == '*' ? "locked" : "set";
        if (password == "set") {
          problems.emplace_back("has a usable password");
          fixes.push_back(fmt::format("usermod --lock {}", name));
        }
      }
    }
    ids.push_back({name, pw.pw_uid, pw.pw_gid});
    const std::string seen = fmt::format("uid {} gid {}, shell {}, password {}", pw.pw_uid, pw.pw_gid, shell, password);
    if (!problems.empty()) {
      out.push_back(fail(label, fmt::format("{} ({})", fmt::join(problems, "; "), seen), fmt::format("{}", fmt::join(fixes, "; "))));
    } else {
      out.push_back(ok(label, "unprivileged, no login: " + seen));
    }
  }
  return out;
}

// Bounded ownership scan: files owned (user or group) by a service account under host paths a
// job must never be able to change.
// A subtree the runner hands to one account by design (the Git mirrors and bundle transfers to
// workspace_git_user, the VM work and data disks to motor-qemu): that account owning what is in
// it is not a finding; any other service account still is.
struct GrantedTree {
  std::string prefix;
  AccountIds account;
};

bool under(const std::string& path, const std::string& prefix) {
  return path == prefix || path.rfind(prefix + "/", 0) == 0;
}

struct ScanState {
  const std::vector<AccountIds>* ids = nullptr;
  std::string skip_prefix;           // the workspace root: motor-job owns workspaces by design
  std::vector<GrantedTree> granted;
  size_t entries = 0;
  size_t max_entries = 0;
  int64_t deadline_ms = 0;
  bool truncated = false;
  std::vector<std::string> found;
};
ScanState* g_scan = nullptr;

int scan_entry(const char* path, const struct stat* st, int type, FTW* ftw) {
  (void)ftw;
  ScanState& s = *g_scan;
  if (++s.entries > s.max_entries || (s.entries % 4096 == 0 && now_ms() > s.deadline_ms) || interrupted()) {
    s.truncated = true;
    return FTW_STOP;
  }
  const std::string p(path);
  if (!s.skip_prefix.empty() && (p == s.skip_prefix || p.rfind(s.skip_prefix + "/", 0) == 0)) {
    return type == FTW_D ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
  }
  if (type == FTW_NS) return FTW_CONTINUE;
  for (const auto& a : *s.ids) {
    if (st->st_uid == a.uid || st->st_gid == a.gid) {
      const bool by_design = std::any_of(s.granted.begin(), s.granted.end(), [&](const GrantedTree& g) {
        return g.account.uid == a.uid && under(p, g.prefix);
      });
      if (by_design) break;
      if (s.found.size() < 8) {
        s.found.push_back(fmt::format("{} ({} {})", p, st->st_uid == a.uid ? "owned by" : "group", a.name));
      } else if (s.found.size() == 8) {
        s.found.emplace_back("...");
      }
      break;
    }
  }
  return FTW_CONTINUE;
}

HostCheck check_ownership(const config::Config& config, const std::vector<AccountIds>& ids) {
  std::vector<std::string> roots = {"/etc", "/usr", "/run/motor"};
  struct stat st {};
  if (stat(config.state_dir.c_str(), &st) == 0) roots.push_back(config.state_dir);
  ScanState s;
  s.ids = &ids;
  s.skip_prefix = config.effective_workspace_root();
  auto grant = [&](const std::string& prefix, const std::string& account) {
    for (const auto& a : ids) {
      if (a.name == account) s.granted.push_back({prefix, a});
    }
  };
  grant(config.state_dir + "/mirrors", config.workspace_git_user);
  grant(config.state_dir + "/transfers", config.workspace_git_user);
  grant(config.vm_dir, "motor-qemu");
  grant(config.vm_data_dir, "motor-qemu");
  s.max_entries = 1'000'000;
  s.deadline_ms = now_ms() + 60'000;
  g_scan = &s;
  std::vector<std::string> scanned;
  for (const auto& root : roots) {
    if (stat(root.c_str(), &st) != 0) continue;
    scanned.push_back(root);
    nftw(root.c_str(), scan_entry, 32, FTW_PHYS | FTW_MOUNT | FTW_ACTIONRETVAL);
    if (s.truncated) break;
  }
  g_scan = nullptr;
  const std::string where = fmt::format(
      "{} (workspaces excluded; mirrors and transfers of {}, VM disks of motor-qemu allowed), {} entries",
      fmt::join(scanned, ", "), config.workspace_git_user, s.entries);
  if (!s.found.empty()) {
    return fail("service accounts own nothing", fmt::format("found: {} in {}", fmt::join(s.found, ", "), where),
                "chown root:root each path (a service account must not own host files or directories a job could change "
                "after an escape, or a runner file it could read)");
  }
  if (s.truncated) {
    return fail("service accounts own nothing", "scan stopped at its bound before finishing: " + where,
                "the host has more files under these paths than the gate scans; check by hand: find /etc /usr -user "
                "motor-job -o -group motor-job");
  }
  return ok("service accounts own nothing", "nothing owned by them in " + where);
}

// --- kernel features ----------------------------------------------------------------------------

HostCheck check_ksm() {
  bool present = false;
  const std::string run = trimmed(read_text("/sys/kernel/mm/ksm/run", &present));
  if (!present) return ok("KSM off", "/sys/kernel/mm/ksm/run absent (no same-page merging in this kernel)");
  if (run == "0" || run == "2") return ok("KSM off", "/sys/kernel/mm/ksm/run = " + run);
  return fail("KSM off", "/sys/kernel/mm/ksm/run = " + run + ": pages of different jobs may be merged (a timing side channel)",
              "echo 2 > /sys/kernel/mm/ksm/run (unmerge and stop), and keep it off at boot (disable ksmtuned)");
}

HostCheck check_core_scheduling(HostFacts& facts) {
#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#endif
  unsigned long cookie = 0;
  const int rc = prctl(PR_SCHED_CORE, 0 /* PR_SCHED_CORE_GET */, 0 /* self */, 0 /* PIDTYPE_PID */, &cookie);
  const std::string smt = trimmed(read_text("/sys/devices/system/cpu/smt/active"));
  const std::string smt_text = smt == "1" ? "SMT active" : smt == "0" ? "SMT off" : "SMT state unknown";
  facts.core_scheduling = rc == 0;
  if (rc != 0) {
    return note("core scheduling",
                fmt::format("unavailable on this kernel (PR_SCHED_CORE: {}); {}; jobs are separated by claims of whole cores, "
                            "and QEMU of VM jobs runs without a core-scheduling cookie of its own",
                            std::strerror(errno), smt_text));
  }
  return note("core scheduling", "available (PR_SCHED_CORE); " + smt_text +
                                     "; Motor claims whole cores, and gives each VM job's QEMU a cookie of its own");
}

// Windows jobs (issue 8): whether they are on, and whether they may run without KVM.
HostCheck check_vm_jobs(const config::Config& config) {
  if (config.vm_image.empty()) return note("VM jobs", "off (vm_image is not set): platform \"windows\" jobs are refused");
  const std::string accelerator = std::string("vm_accelerator = ") + vm::accelerator_name(config.vm_accelerator);
  if (config.vm_accelerator == vm::Accelerator::kTcg) {
    return note("VM jobs", "on, " + accelerator + ": they always run under TCG emulation (slow; meant for tests)");
  }
  if (config.allow_emulation && config.vm_accelerator == vm::Accelerator::kAuto) {
    return note("VM jobs", "on, " + accelerator + " and allow_emulation = true: where motor-qemu cannot use KVM they run "
                           "under TCG emulation (slow; meant for tests)");
  }
  return ok("VM jobs", "on, KVM required (" + accelerator + ", allow_emulation = " +
                           (config.allow_emulation ? "true" : "false") + ")");
}

HostCheck check_disk_floor(const config::Config& config) {
  if (config.disk_free_floor_bytes <= 0) {
    return fail("free-space floor", "disk_free_floor = 0: jobs are admitted even when the disk is full",
                "set disk_free_floor (for example 1G) in the runner config");
  }
  std::string dir = config.effective_workspace_root();
  struct statvfs vfs {};
  while (!dir.empty() && statvfs(dir.c_str(), &vfs) != 0) {
    const auto slash = dir.rfind('/');
    dir = slash == 0 ? "/" : slash == std::string::npos ? "" : dir.substr(0, slash);
    if (dir == "/") {
      if (statvfs("/", &vfs) != 0) dir.clear();
      break;
    }
  }
  const int64_t free_bytes = dir.empty() ? -1 : static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  return ok("free-space floor", fmt::format("disk_free_floor = {} MiB; {} MiB free at {}", config.disk_free_floor_bytes >> 20,
                                            free_bytes >> 20, dir));
}

std::string mode_text(mode_t m) { return fmt::format("{:04o}", m & 07777); }

}  // namespace

const char* check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::kOk: return "ok";
    case CheckStatus::kFail: return "FAIL";
    case CheckStatus::kNote: return "note";
  }
  return "?";
}

std::vector<std::string> service_accounts(const config::Config& config) {
  std::vector<std::string> out = {config.job_user};
  for (const char* a : {"motor-job", "motor-qemu", "motor-prep", "motor-cache"}) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.emplace_back(a);
  }
  return out;
}

HostCheck check_state_dir(const std::string& label, const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return note(label, path + " does not exist yet (the runner creates it root-owned 0711)");
  const std::string seen = fmt::format("{} {} uid {} gid {}", path, mode_text(st.st_mode), st.st_uid, st.st_gid);
  if (!S_ISDIR(st.st_mode)) return fail(label, seen + ": not a directory", "remove it; the runner creates the directory");
  if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    return fail(label, seen, fmt::format("chown root:root {0} && chmod 0711 {0}", path));
  }
  return ok(label, seen);
}

HostCheck check_socket(const std::string& label, const std::string& path, const std::string& group_name) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return note(label, path + " does not exist (no runner is listening)");
  const std::string seen = fmt::format("{} {} uid {} gid {}", path, mode_text(st.st_mode), st.st_uid, st.st_gid);
  group* g = getgrnam(group_name.c_str());
  if (!g) {
    return fail(label, seen + fmt::format("; the group \"{}\" does not exist, so the socket is root-only", group_name),
                fmt::format("groupadd --system {} (then restart the runner)", group_name));
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != 0 || st.st_gid != g->gr_gid || (st.st_mode & 07777) != 0660) {
    return fail(label, seen + fmt::format("; expected a socket 0660 root:{}", group_name),
                fmt::format("chown root:{0} {1} && chmod 0660 {1} (the runner sets this when it starts)", group_name, path));
  }
  return ok(label, seen + " (0660 root:" + group_name + ")");
}

// What every job together may take of two host-wide tables the cgroup limits do not divide: open
// files (each of a job's up to pids_max tasks may hold the fd limit) and process ids (each job up
// to pids_max, max_running_jobs at once). Reported as notes with the figures: the operator decides
// (lower pids_max or the runner's RLIMIT_NOFILE, raise the sysctl); the gate does not guess.
static std::vector<HostCheck> check_host_tables(const config::Config& config) {
  std::vector<HostCheck> out;
  auto number = [](const char* path) -> int64_t {
    bool ok = false;
    const std::string text = trimmed(read_text(path, &ok));
    return ok ? std::atoll(text.c_str()) : -1;
  };
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  // The runner raises its soft limit to the hard one, and jobs inherit it.
  const int64_t fd_limit = nofile.rlim_max == RLIM_INFINITY ? -1 : static_cast<int64_t>(nofile.rlim_max);
  const int64_t file_max = number("/proc/sys/fs/file-max");
  const int64_t pid_max = number("/proc/sys/kernel/pid_max");
  if (file_max > 0 && fd_limit > 0) {
    const int64_t per_job = config.pids_max * fd_limit;
    out.push_back(note("host file table (fs.file-max)",
                       fmt::format("fs.file-max {}; one job may open pids_max {} x fd limit {} = {} files ({}), {} jobs "
                                   "at once {}; to bound it lower pids_max or the runner's RLIMIT_NOFILE",
                                   file_max, config.pids_max, fd_limit, per_job,
                                   per_job >= file_max ? "one job can fill the host's file table" : "below it",
                                   config.max_running_jobs, per_job * config.max_running_jobs)));
  }
  if (pid_max > 0) {
    const int64_t all = config.pids_max * config.max_running_jobs;
    const int64_t fill = config.pids_max > 0 ? (pid_max + config.pids_max - 1) / config.pids_max : 0;
    out.push_back(note("host process ids (kernel.pid_max)",
                       fmt::format("kernel.pid_max {}; pids_max {} x max_running_jobs {} = {} ({}); to bound it lower "
                                   "pids_max or max_running_jobs, or raise kernel.pid_max",
                                   pid_max, config.pids_max, config.max_running_jobs, all,
                                   all >= pid_max ? fmt::format("{} jobs at their pids limit fill pid_max", fill)
                                                  : std::string("below it"))));
  }
  return out;
}

std::vector<HostCheck> run_host_checks(const config::Config& config, HostFacts& facts) {
  std::vector<HostCheck> out;
  utsname u{};
  if (uname(&u) == 0) facts.machine = u.machine;
  out.push_back(ok("runner version", fmt::format("motor-runner {} (protocol {})", kVersion, kProtocolVersion)));
  out.push_back(check_namespaces(facts));
  out.push_back(check_seccomp(facts));
  out.push_back(check_cgroups(config, facts));
  std::vector<AccountIds> ids;
  for (auto& c : check_accounts(config, ids)) out.push_back(std::move(c));
  out.push_back(check_ownership(config, ids));
  out.push_back(check_state_dir("configured state directory", config.state_dir));
  out.push_back(check_socket("configured socket", config.socket_path, config.socket_group));
  out.push_back(check_ksm());
  out.push_back(check_core_scheduling(facts));
  out.push_back(check_disk_floor(config));
  for (auto& c : check_host_tables(config)) out.push_back(std::move(c));
  out.push_back(check_vm_jobs(config));
  return out;
}

}  // namespace motor::gate
