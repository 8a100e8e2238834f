#include "gate/attacks.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/msg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <netinet/in.h>
#include <sched.h>
#include <simdjson.h>

#include "motor/unique_fd.hpp"
#include "protocol/json_writer.hpp"
#include "gate/arrival_listeners.hpp"
#include "netpolicy/dns_filter.hpp"
#include "netpolicy/outbound.hpp"
#include "netpolicy/resolver.hpp"
#include "sandbox/devices.hpp"
#include "netpolicy/egress.hpp"
#include "netpolicy/netpolicy.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::gate {
namespace {

namespace fs = std::filesystem;

// More ptys than a job's devpts instance allows (sandbox/devices.hpp kJobPtyMax), fewer than the
// fd limit: the pty attack stops there when the limit is missing.
constexpr int kGatePtyTries = 192;
static_assert(kGatePtyTries > sandbox::kJobPtyMax);
// The socket-buffer attack queues at most the ceiling per protocol in a 64 MiB job; reaching the
// bound means the job's limit did not hold them.
constexpr long kSocketCeilingMiB = 256;
constexpr long kSocketBoundMiB = 128;
// How long a scan attack waits for the terminal record of a job that ends in seconds (the scan's
// own deadline is 5 minutes).
constexpr int kScanWaitMs = 45'000;

// Helpers every python attack starts with. A result line is "label=value": value "OK ..." when
// the operation succeeded, otherwise the errno name (EROFS, ENOENT, EPERM...).
constexpr std::string_view kPrelude = R"PY(import os, sys, errno, socket, ctypes, time, subprocess
def _en(e):
    if isinstance(e, socket.gaierror):
        return 'EAI(%s)' % e.errno
    if isinstance(e, OSError) and e.errno:
        return errno.errorcode.get(e.errno, 'E%d' % e.errno)
    return type(e).__name__
def P(label, value):
    print('%s=%s' % (label, value), flush=True)
def T(label, f):
    try:
        r = f()
        P(label, 'OK' if r is None else 'OK %s' % (r,))
    except BaseException as e:
        P(label, _en(e))
def W(path, keep=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    if not keep:
        os.unlink(path)
def R(path):
    with open(path, 'rb') as f:
        return '(read %d bytes)' % len(f.read(1 << 20))
def OW(path):
    os.close(os.open(path, os.O_WRONLY))
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def SC(nr, *args):
    a = [ctypes.c_long(x) if isinstance(x, int) else x for x in args]
    r = _libc.syscall(ctypes.c_long(nr), *a)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return None
def C(label, f):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            f()
        except OSError as e:
            code = e.errno if e.errno and 0 < e.errno < 250 else 250
        except BaseException:
            code = 251
        os._exit(code)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        P(label, 'killed by signal %d' % os.WTERMSIG(st))
        return
    c = os.WEXITSTATUS(st)
    P(label, 'OK' if c == 0 else 'ERROR' if c >= 250 else errno.errorcode.get(c, 'E%d' % c))
def RUN(label, argv):
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        out = p.stdout.decode('utf-8', 'replace').strip().replace('\n', ' | ')[:160]
        P(label, ('OK' if p.returncode == 0 else 'failed (exit %d)' % p.returncode) + (': ' + out if out else ''))
    except BaseException as e:
        P(label, 'failed (%s)' % _en(e))
)PY";

// A python string literal.
std::string py(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A python expression for `s` whose source text does not contain `s` (so a job's own command
// line never matches a marker the gate looks for).
std::string py_split(std::string_view s) {
  const size_t half = s.size() / 2;
  return "(" + py(s.substr(0, half)) + " + " + py(s.substr(half)) + ")";
}

// The host directory of the gate's own workspace `key` (the runner's opaque name for it).
std::string gate_workspace_dir(const AttackEnv& env, const std::string& key) {
  auto dir = workspace::workspace_dir_path(env.workspace_root, "root", key);
  return dir ? *dir : std::string();
}

JobRequest python_job(const AttackEnv& env, const std::string& vars, std::string_view body, int64_t timeout_s = 60) {
  JobRequest rq;
  rq.workspace_key = env.workspace_key;
  rq.argv = {"/usr/bin/python3", "-c", std::string(kPrelude) + vars + std::string(body)};
  rq.timeout_s = timeout_s;
  return rq;
}

int job_timeout_ms(const JobRequest& rq) { return static_cast<int>((rq.timeout_s + 30) * 1000); }

JobResult run(AttackEnv& env, const JobRequest& rq, const std::function<void(const std::string&)>& on_first = {}) {
  return env.run_job(rq, job_timeout_ms(rq), on_first);
}

std::string tail(const std::string& s, size_t n = 300) {
  std::string t = s.size() > n ? "..." + s.substr(s.size() - n) : s;
  std::replace(t.begin(), t.end(), '\n', ' ');
  return t;
}

Verdict stopped(std::string e) { return {Result::kStopped, std::move(e), false}; }
Verdict through(std::string e) { return {Result::kGotThrough, std::move(e), false}; }
Verdict inconclusive(std::string e) { return {Result::kInconclusive, std::move(e), false}; }

// The job did not run its course: nothing can be judged.
std::optional<Verdict> not_run(const JobResult& r) {
  if (!r.error.empty()) return inconclusive("the job could not be run: " + r.error);
  if (!r.have_terminal) return inconclusive("no terminal record");
  if (r.outcome.kind == protocol::Outcome::Kind::kRefusedBeforeStart) {
    return inconclusive("the runner refused the job: " + r.outcome_text());
  }
  return std::nullopt;
}

// One expected result line: the values that mean the control held. A value ending in '*'
// matches as a prefix.
struct Expect {
  std::string label;
  std::vector<std::string> stopped;
};

bool matches(const std::string& value, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed) {
    if (!a.empty() && a.back() == '*') {
      if (value.rfind(a.substr(0, a.size() - 1), 0) == 0) return true;
    } else if (value == a) {
      return true;
    }
  }
  return false;
}

Verdict judge_lines(const JobResult& r, const std::vector<Expect>& expects, const std::vector<std::string>& info = {}) {
  if (auto v = not_run(r)) return *v;
  const auto got = parse_result_lines(r.out);
  std::vector<std::string> held, broke, missing;
  for (const auto& e : expects) {
    auto it = got.find(e.label);
    if (it == got.end()) {
      missing.push_back(e.label);
      continue;
    }
    const std::string& v = it->second;
    if (matches(v, e.stopped)) {
      held.push_back(e.label + ": " + v);
    } else if (v.rfind("OK", 0) == 0) {
      broke.push_back(e.label + ": succeeded " + v);
    } else {
      broke.push_back(fmt::format("{}: {} (expected {}: something else stopped it, not this control)", e.label, v,
                                  fmt::join(e.stopped, " or ")));
    }
  }
  std::vector<std::string> extra;
  for (const auto& l : info) {
    if (auto it = got.find(l); it != got.end()) extra.push_back(l + ": " + it->second);
  }
  const std::string extra_text = extra.empty() ? "" : fmt::format("; {}", fmt::join(extra, "; "));
  if (!broke.empty()) return through(fmt::format("{}{}", fmt::join(broke, "; "), extra_text));
  if (!missing.empty()) {
    return inconclusive(fmt::format("no result for {} (job {}; stderr: {})", fmt::join(missing, ", "), r.outcome_text(),
                                    tail(r.err)));
  }
  return stopped(fmt::format("{}{}", fmt::join(held, "; "), extra_text));
}

// The simplest attack: a python body whose result lines must all show the control's signature.
using ExpectsFn = std::function<std::vector<Expect>(const AttackEnv&)>;

Attack probe_attack(std::string id, std::string control, std::string description,
                    std::function<std::string(const AttackEnv&)> vars, std::string body, ExpectsFn expects,
                    std::vector<std::string> info = {}) {
  Attack a;
  a.id = std::move(id);
  a.control = std::move(control);
  a.description = std::move(description);
  a.run = [vars = std::move(vars), body = std::move(body), expects = std::move(expects),
           info = std::move(info)](AttackEnv& env) {
    return judge_lines(run(env, python_job(env, vars ? vars(env) : "", body)), expects(env), info);
  };
  return a;
}

Attack probe_attack(std::string id, std::string control, std::string description,
                    std::function<std::string(const AttackEnv&)> vars, std::string body, std::vector<Expect> expects,
                    std::vector<std::string> info = {}) {
  return probe_attack(std::move(id), std::move(control), std::move(description), std::move(vars), std::move(body),
                      ExpectsFn([expects = std::move(expects)](const AttackEnv&) { return expects; }), std::move(info));
}

std::string read_host(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Kills what an attack left on the host; says what it found.
std::string kill_leftovers(AttackEnv& env, const std::vector<std::string>& markers) {
  std::vector<std::string> found;
  for (const auto& m : markers) {
    for (pid_t p : env.processes_with(m)) {
      found.push_back(std::to_string(p));
      kill(p, SIGKILL);
    }
  }
  return fmt::format("{}", fmt::join(found, ","));
}

// Job cgroups left under the gate runner's parent, in every hierarchy.
std::vector<std::string> leftover_cgroups(const AttackEnv& env) {
  std::vector<std::string> out;
  for (const auto& m : env.facts.cgroup_mounts) {
    const std::string parent = m + "/" + env.cgroup_parent;
    if (DIR* d = opendir(parent.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_type == DT_DIR && e->d_name[0] != '.') out.push_back(parent + "/" + e->d_name);
      }
      closedir(d);
    }
  }
  return out;
}

std::optional<Verdict> need(bool have, const std::string& what) {
  if (have) return std::nullopt;
  return Verdict{Result::kSkipped, "this host has no " + what, true};
}

// ---------------------------------------------------------------------------------------------
// The seccomp tries: harmless calls whose result without the filter differs from the filter's
// EPERM wherever the kernel allows (bad pointers give EFAULT, bad fds EBADF, bad flags EINVAL).
// x86_64 numbers.
constexpr std::string_view kSeccompTries = R"PY(TRIES = [
    ('add_key', 248, (0, 0, 0, 0, 0), 'EPERM'), ('request_key', 249, (0, 0, 0, 0), 'EPERM'),
    ('keyctl', 250, (-1, 0, 0, 0, 0), 'EPERM'), ('bpf', 321, (-1, 0, 0), 'EPERM'),
    ('perf_event_open', 298, (0, 0, -1, -1, 0), 'EPERM'), ('userfaultfd', 323, (0xffffffff,), 'EPERM'),
    ('ptrace', 101, (0x7fff, 0, 0, 0), 'EPERM'), ('process_vm_readv', 310, (0, 0, 0, 0, 0, -1), 'EPERM'),
    ('process_vm_writev', 311, (0, 0, 0, 0, 0, -1), 'EPERM'), ('pidfd_getfd', 438, (-1, -1, 0), 'EPERM'),
    ('kcmp', 312, (0, 0, -1, 0, 0), 'EPERM'), ('modify_ldt', 154, (0, 0, 0), 'EPERM'),
    ('mount', 165, (0, 0, 0, 0, 0), 'EPERM'), ('umount2', 166, (0, 0xffffffff), 'EPERM'),
    ('pivot_root', 155, (0, 0), 'EPERM'), ('chroot', 161, (0,), 'EPERM'),
    ('move_mount', 429, (-1, 0, -1, 0, 0xffffffff), 'EPERM'), ('open_tree', 428, (-1, 0, 0xffffffff), 'EPERM'),
    ('fsopen', 430, (0, 0xffffffff), 'EPERM'), ('fspick', 433, (-1, 0, 0xffffffff), 'EPERM'),
    ('mount_setattr', 442, (-1, 0, 0xffffffff, 0, 0), 'EPERM'),
    ('unshare', 272, (0x1000,), 'EPERM'), ('setns', 308, (-1, 0), 'EPERM'),
    ('clone(CLONE_NEWUSER)', 56, (0x10000000 | 17, 0, 0, 0, 0), 'EPERM'),
    ('clone(CLONE_NEWNS)', 56, (0x00020000 | 17, 0, 0, 0, 0), 'EPERM'),
    ('clone3', 435, (0, 0), 'ENOSYS'),
    ('kexec_load', 246, (0, 0, 0, 0xffffffff), 'EPERM'), ('init_module', 175, (0, 0, 0), 'EPERM'),
    ('finit_module', 313, (-1, 0, 0xffffffff), 'EPERM'), ('delete_module', 176, (0, 0), 'EPERM'),
    ('open_by_handle_at', 304, (-1, 0, 0), 'EPERM'), ('swapon', 167, (0, 0), 'EPERM'),
    ('reboot', 169, (0, 0, 0, 0), 'EPERM'), ('acct', 163, (b'',), 'EPERM'), ('quotactl', 179, (0, 0, 0, 0), 'EPERM'),
    ('iopl', 172, (4,), 'EPERM'), ('ioperm', 173, (65536, 1, 1), 'EPERM'),
    ('ioctl(TIOCSTI)', 16, (-1, 0x5412, 0), 'EPERM'), ('io_uring_setup', 425, (0, 0), 'EPERM'),
    ('personality(PER_LINUX32)', 135, (8,), 'EPERM'),
    ('getpid (allowed)', 39, (), 'OK'),
]
for name, nr, args, _ in TRIES:
    C(name, lambda nr=nr, args=args: SC(nr, *args))
)PY";

std::vector<Expect> seccomp_expects() {
  // Kept in step with kSeccompTries.
  static const std::vector<std::pair<const char*, const char*>> kNames = {
      {"add_key", "EPERM"}, {"request_key", "EPERM"}, {"keyctl", "EPERM"}, {"bpf", "EPERM"},
      {"perf_event_open", "EPERM"}, {"userfaultfd", "EPERM"}, {"ptrace", "EPERM"}, {"process_vm_readv", "EPERM"},
      {"process_vm_writev", "EPERM"}, {"pidfd_getfd", "EPERM"}, {"kcmp", "EPERM"}, {"modify_ldt", "EPERM"},
      {"mount", "EPERM"}, {"umount2", "EPERM"},
      {"pivot_root", "EPERM"}, {"chroot", "EPERM"}, {"move_mount", "EPERM"}, {"open_tree", "EPERM"},
      {"fsopen", "EPERM"}, {"fspick", "EPERM"}, {"mount_setattr", "EPERM"}, {"unshare", "EPERM"}, {"setns", "EPERM"},
      {"clone(CLONE_NEWUSER)", "EPERM"}, {"clone(CLONE_NEWNS)", "EPERM"}, {"clone3", "ENOSYS"},
      {"kexec_load", "EPERM"}, {"init_module", "EPERM"}, {"finit_module", "EPERM"}, {"delete_module", "EPERM"},
      {"open_by_handle_at", "EPERM"}, {"swapon", "EPERM"}, {"reboot", "EPERM"}, {"acct", "EPERM"},
      {"quotactl", "EPERM"}, {"iopl", "EPERM"}, {"ioperm", "EPERM"}, {"ioctl(TIOCSTI)", "EPERM"},
      {"io_uring_setup", "EPERM"}, {"personality(PER_LINUX32)", "EPERM"}, {"getpid (allowed)", "OK"}};
  std::vector<Expect> out;
  for (const auto& [n, v] : kNames) out.push_back({n, {v}});
  return out;
}

std::optional<Verdict> need_x86_64(const AttackEnv& env) {
  if (env.facts.machine == "x86_64") return std::nullopt;
  return Verdict{Result::kSkipped, "the gate's syscall tries know x86_64 numbers only (this host: " + env.facts.machine + ")",
                 true};
}

// ---------------------------------------------------------------------------------------------

Attack fork_bomb() {
  Attack a;
  a.id = "fork-bomb";
  a.control = "pids limit (pids.max = pids_max)";
  a.description = "create tasks until the kernel refuses, then fork once more";
  a.needs = "pids controller";
  a.skip = [](const AttackEnv& env) { return need(env.facts.pids_controller, "pids cgroup controller"); };
  a.run = [](AttackEnv& env) {
    constexpr int64_t kMostTried = 8192;  // the gate never pushes a host harder than this
    const int64_t pids_max = env.config->pids_max;
    const int64_t target = std::min(pids_max, kMostTried) + 16;
    const std::string vars = fmt::format("TARGET = {}\n", target);
    auto r = run(env, python_job(env, vars, R"PY(import threading
threading.stack_size(65536)
ev = threading.Event()
made, err = 0, 'none'
while made < TARGET:
    try:
        t = threading.Thread(target=ev.wait, daemon=True)
        t.start()
        made += 1
    except BaseException as e:
        err = '%s: %s' % (_en(e), str(e)[:60])
        break
P('threads', made)
P('thread_error', err)
def fork_once():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
T('fork at the limit', fork_once)
ev.set()
)PY", 120));
    if (auto v = not_run(r)) return *v;
    const auto got = parse_result_lines(r.out);
    if (!got.count("threads") || !got.count("fork at the limit")) {
      return inconclusive(fmt::format("no result (job {}; stderr: {})", r.outcome_text(), tail(r.err)));
    }
    const int64_t made = std::atoll(got.at("threads").c_str());
    const std::string fork_result = got.at("fork at the limit");
    const std::string ev = fmt::format("{} threads created, then {}; fork at the limit: {} (pids_max = {})", made,
                                       got.count("thread_error") ? got.at("thread_error") : "?", fork_result, pids_max);
    if (made >= target) {
      return through(pids_max > kMostTried
                         ? fmt::format("{} tasks and no limit hit: pids_max = {} is more than the gate will try ({}); "
                                       "lower pids_max",
                                       made, pids_max, kMostTried)
                         : fmt::format("{} tasks and no limit hit ({})", made, ev));
    }
    // The job's tasks at the limit: motor-init, the python main thread and its threads.
    const int64_t tasks = made + 2;
    if (tasks > pids_max) return through("more tasks than pids_max: " + ev);
    if (tasks + 8 < pids_max) {
      return through("stopped below pids_max by something else (an rlimit or memory), not the pids limit: " + ev);
    }
    if (fork_result != "EAGAIN") return through(ev);
    return stopped(ev);
  };
  return a;
}

Attack memory_balloon() {
  Attack a;
  a.id = "memory-balloon";
  a.control = "memory limit (memory.max / memory.limit_in_bytes + memsw)";
  a.description = "fill 256 MiB of real anonymous memory in a job limited to 64M";
  a.needs = "memory controller";
  a.skip = [](const AttackEnv& env) { return need(env.facts.memory_controller, "memory cgroup controller"); };
  a.run = [](AttackEnv& env) {
    auto rq = python_job(env, "", "b = b'x' * (256 << 20)\nP('survived', len(b))\n");
    rq.memory = "64M";
    auto r = run(env, rq);
    if (auto v = not_run(r)) return *v;
    if (r.out.find("survived=") != std::string::npos) return through("256 MiB filled under a 64M limit (" + r.outcome_text() + ")");
    if (r.oom_killed) return stopped("OOM-killed and reported: " + r.outcome_text());
    return inconclusive("neither survived nor reported as OOM-killed: " + r.outcome_text() + "; stderr: " + tail(r.err));
  };
  return a;
}

Attack cpuset() {
  Attack a;
  a.id = "cpuset";
  a.control = "CPUs pinned to the job's claim (cpuset)";
  a.description = "ask for 1 CPU and read Cpus_allowed_list while exec.status shows the claim";
  a.needs = "cpuset controller";
  a.skip = [](const AttackEnv& env) { return need(env.facts.cpuset_controller, "cpuset cgroup controller"); };
  a.run = [](AttackEnv& env) {
    auto rq = python_job(env, "", R"PY(for line in open('/proc/self/status'):
    if line.startswith('Cpus_allowed_list:'):
        P('Cpus_allowed_list', line.split(':', 1)[1].strip())
time.sleep(2)
)PY");
    rq.cpus = 1;
    std::string claim, status_error;
    auto r = run(env, rq, [&](const std::string& job_id) {
      auto st = env.call("exec.status", "{}");
      if (!st) {
        status_error = st.error().message;
        return;
      }
      simdjson::dom::parser p;
      simdjson::dom::element root;
      simdjson::dom::array jobs;
      if (p.parse(*st).get(root) || root["running_jobs"].get_array().get(jobs)) return;
      for (auto j : jobs) {
        std::string_view id, cpus;
        if (!j["job_id"].get_string().get(id) && id == job_id && !j["cpus"].get_string().get(cpus)) claim = std::string(cpus);
      }
    });
    if (auto v = not_run(r)) return *v;
    const auto got = parse_result_lines(r.out);
    if (!got.count("Cpus_allowed_list")) return inconclusive("no Cpus_allowed_list (" + r.outcome_text() + ")");
    if (claim.empty()) return inconclusive("exec.status did not list the running job's claim " + status_error);
    const std::string seen = got.at("Cpus_allowed_list");
    const std::string online = trim(read_host("/sys/devices/system/cpu/online"));
    const std::string ev = fmt::format("claim {}, the job's Cpus_allowed_list {}, host CPUs {}", claim, seen, online);
    if (seen != claim) return through(ev);
    return stopped(ev + (seen == online ? " (one core is the whole host here)" : ""));
  };
  return a;
}

Attack env_canaries() {
  Attack a;
  a.id = "env-canaries";
  a.control = "environment filter (secret-named variables never cross)";
  a.description = "pass GH_TOKEN, API_KEY, MY_SECRET_VALUE canaries in exec.run env; search env, /proc/1/environ, files";
  a.run = [](AttackEnv& env) {
    const std::string m = env.new_marker();
    const std::vector<std::pair<std::string, std::string>> canaries = {
        {"GH_TOKEN", "gate-canary-gh-" + m}, {"API_KEY", "gate-canary-api-" + m}, {"MY_SECRET_VALUE", "gate-canary-secret-" + m}};
    const std::string forwarded = "gate-forwarded-" + m;
    auto rq = python_job(env, "", R"PY(srcs = [('environment', '\n'.join('%s=%s' % kv for kv in os.environ.items()))]
for p in ('/proc/1/environ', '/proc/self/environ'):
    try:
        with open(p, 'rb') as f:
            srcs.append((p, f.read().replace(b'\0', b'\n').decode('utf-8', 'replace')))
    except OSError as e:
        P('read ' + p, _en(e))
n = 0
for top in ('/workspace', '/tmp'):
    for d, dirs, files in os.walk(top):
        for name in files:
            n += 1
            if n > 500:
                break
            try:
                with open(os.path.join(d, name), 'rb') as f:
                    srcs.append((os.path.join(d, name), f.read(1 << 20).decode('utf-8', 'replace')))
            except OSError:
                pass
P('files searched', n)
for where, text in srcs:
    for line in text.splitlines():
        if ('gate-' 'canary-') in line:
            P('canary in ' + where, line[:200])
        if ('gate-' 'forwarded-') in line:
            P('forwarded in ' + where, 'yes')
)PY");
    rq.env = {canaries[0], canaries[1], canaries[2], {"CARGO_GATE_PROBE", forwarded}};
    auto r = run(env, rq);
    if (auto v = not_run(r)) return *v;
    std::vector<std::string> leaks;
    for (const auto& [name, value] : canaries) {
      if (r.out.find(value) != std::string::npos || r.err.find(value) != std::string::npos) leaks.push_back(name);
    }
    const auto got = parse_result_lines(r.out);
    if (!leaks.empty()) {
      std::vector<std::string> where;
      for (const auto& [k, v] : got) {
        if (k.rfind("canary in ", 0) == 0) where.push_back(k.substr(10));
      }
      return through(fmt::format("the job saw {} in {}", fmt::join(leaks, ", "), fmt::join(where, ", ")));
    }
    // /proc/1/environ is unreadable to the job (motor-init is not dumpable): the command's own
    // environment is init's, and /proc/self/environ shows it as the kernel holds it.
    if (!got.count("forwarded in environment") || !got.count("forwarded in /proc/self/environ")) {
      return inconclusive("the forwarded control variable CARGO_GATE_PROBE was not seen: the job's environment could not "
                          "be read (" + r.outcome_text() + "; stderr: " + tail(r.err) + ")");
    }
    return stopped(fmt::format("no canary in the environment, /proc/1/environ, /proc/self/environ or {} files; "
                               "env_not_forwarded: {}; CARGO_GATE_PROBE did cross",
                               got.count("files searched") ? got.at("files searched") : "?",
                               fmt::join(r.env_not_forwarded, ",")));
  };
  return a;
}

Attack ssh_auth_sock() {
  Attack a;
  a.id = "ssh-auth-sock";
  a.control = "environment filter (SSH_AUTH_SOCK never crosses)";
  a.description = "pass SSH_AUTH_SOCK in exec.run env";
  a.run = [](AttackEnv& env) {
    auto rq = python_job(env, "", R"PY(P('SSH_AUTH_SOCK in the environment', os.environ.get('SSH_AUTH_SOCK', 'absent'))
for p in ('/proc/1/environ', '/proc/self/environ'):
    try:
        with open(p, 'rb') as f:
            P('SSH_AUTH_SOCK in ' + p, 'present' if b'SSH_AUTH_SOCK' in f.read() else 'absent')
    except OSError as e:
        P('SSH_AUTH_SOCK in ' + p, 'unreadable (%s)' % _en(e))
)PY");
    rq.env = {{"SSH_AUTH_SOCK", "/tmp/gate-agent-" + env.new_marker() + ".sock"}};
    // /proc/1/environ is unreadable while motor-init is not dumpable; readable, it must not hold it.
    return judge_lines(run(env, rq), {{"SSH_AUTH_SOCK in the environment", {"absent"}},
                                      {"SSH_AUTH_SOCK in /proc/1/environ", {"absent", "unreadable (EACCES)"}},
                                      {"SSH_AUTH_SOCK in /proc/self/environ", {"absent"}}});
  };
  return a;
}

Attack timeout_loop() {
  Attack a;
  a.id = "timeout";
  a.control = "deadline kills the job's whole cgroup";
  a.description = "an infinite loop with a background child and a setsid'd daemon past a 2 s timeout";
  a.run = [](AttackEnv& env) {
    const std::string m1 = env.new_marker(), m2 = env.new_marker();
    JobRequest rq;
    rq.workspace_key = env.workspace_key;
    rq.command = fmt::format("sleep 3600.{} & (setsid sleep 3600.{} &); echo looping; while :; do :; done", m1, m2);
    rq.timeout_s = 2;
    const int64_t t0 = now_ms();
    auto r = run(env, rq);
    const int64_t took = now_ms() - t0;
    if (!r.error.empty() || !r.have_terminal) return inconclusive("the job could not be run: " + r.outcome_text());
    if (r.out.find("looping") == std::string::npos) return inconclusive("the loop never started: " + r.outcome_text());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string left = kill_leftovers(env, {m1, m2});
    const auto cgroups = leftover_cgroups(env);
    const std::string ev = fmt::format("{} after {} ms", r.outcome_text(), took);
    if (!left.empty()) return through(ev + "; processes of the job still ran on the host (pids " + left + ", now killed)");
    if (!cgroups.empty()) return through(ev + "; job cgroups remain: " + cgroups.front());
    if (r.killed != std::optional<std::string>("deadline")) return through(ev + "; not killed at its deadline");
    return stopped(ev + "; no process of the job and no job cgroup remains");
  };
  return a;
}

Attack daemon() {
  Attack a;
  a.id = "daemon";
  a.control = "the job's PID namespace and cgroup end with the command";
  a.description = "double-fork a setsid daemon that outlives the command";
  a.run = [](AttackEnv& env) {
    const std::string m = env.new_marker();
    auto r = run(env, python_job(env, "MK = '3600.' + " + py_split(m) + "\n", R"PY(pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open('/dev/null', os.O_RDWR)
        for i in (0, 1, 2):
            os.dup2(fd, i)
        os.execv('/bin/sleep', ['sleep', MK])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.3)
P('daemon', 'started')
)PY"));
    if (auto v = not_run(r)) return *v;
    if (r.out.find("daemon=started") == std::string::npos) return inconclusive("the daemon did not start: " + tail(r.err));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string left = kill_leftovers(env, {m});
    if (!left.empty()) return through("the daemon outlived the job (host pids " + left + ", now killed)");
    const auto cgroups = leftover_cgroups(env);
    if (!cgroups.empty()) return through("a job cgroup remains: " + cgroups.front());
    return stopped("the command exited (" + r.outcome_text() + ") and nothing with the daemon's marker remains on the host");
  };
  return a;
}

Attack host_processes() {
  return probe_attack(
      "proc-host", "own PID namespace (fresh /proc)", "see host processes in /proc",
      [](const AttackEnv& env) {
        return fmt::format("MK = {}\nHOSTPID = {}\n", py_split(env.host_marker), env.host_marker_pid);
      },
      R"PY(pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
marker, runner = [], []
for p in pids:
    try:
        with open('/proc/%d/cmdline' % p, 'rb') as f:
            cl = f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except OSError:
        continue
    if MK in cl:
        marker.append(p)
    if ('motor-' 'runner') in cl:
        runner.append(p)
P('processes the job sees', len(pids))
P('host marker process', 'visible as %s' % marker if marker else 'absent')
P('runner process', 'visible as %s' % runner if runner else 'absent')
T('stat /proc/%d (a host pid)' % HOSTPID, lambda: os.stat('/proc/%d' % HOSTPID) and None)
)PY",
      ExpectsFn([](const AttackEnv& env) {
        return std::vector<Expect>{{"host marker process", {"absent"}},
                                   {"runner process", {"absent"}},
                                   {fmt::format("stat /proc/{} (a host pid)", env.host_marker_pid), {"ENOENT"}}};
      }),
      {"processes the job sees"});
}

Attack host_loopback() {
  Attack a;
  a.id = "net-host-loopback";
  a.control = "own network namespace (loopback only)";
  a.description = "connect to a TCP listener the gate opened on the host's 127.0.0.1";
  a.run = [](AttackEnv& env) {
    auto r = run(env, python_job(env, fmt::format("PORT = {}\n", env.listener_port), R"PY(def conn():
    s = socket.create_connection(('127.0.0.1', PORT), timeout=3)
    s.close()
T('connect 127.0.0.1:%d' % PORT, conn)
with open('/proc/net/dev') as f:
    P('interfaces', ','.join(sorted(l.split(':')[0].strip() for l in f.readlines()[2:])))
)PY"));
    const std::string label = fmt::format("connect 127.0.0.1:{}", env.listener_port);
    Verdict v = judge_lines(r, {{label, {"ECONNREFUSED", "ENETUNREACH"}}, {"interfaces", {"lo"}}});
    // Whatever the job printed: did the host's listener get a connection?
    const int c = accept4(env.listener_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
      close(c);
      return through("the gate's host listener accepted a connection from the job; " + v.evidence);
    }
    return v;
  };
  return a;
}

Attack setuid_binary() {
  Attack a;
  a.id = "setuid";
  a.control = "no_new_privs + nosuid workspace";
  a.description = "run a setuid-root copy of /usr/bin/id the gate planted in the workspace";
  a.needs = "the gate running as root (to plant a setuid-root file)";
  a.skip = [](const AttackEnv&) -> std::optional<Verdict> {
    if (geteuid() == 0) return std::nullopt;
    return Verdict{Result::kSkipped, "the gate is not root and cannot plant a setuid-root binary", false};
  };
  a.run = [](AttackEnv& env) {
    const std::string name = "gate-suid-id-" + env.new_marker();
    const std::string planted = env.workspace + "/" + name;
    std::error_code ec;
    fs::copy_file("/usr/bin/id", planted, fs::copy_options::overwrite_existing, ec);
    struct stat st {};
    if (ec || chown(planted.c_str(), 0, 0) != 0 || chmod(planted.c_str(), 04755) != 0 || stat(planted.c_str(), &st) != 0 ||
        !(st.st_mode & S_ISUID) || st.st_uid != 0) {
      return inconclusive("could not plant a setuid-root copy of /usr/bin/id at " + planted);
    }
    auto r = run(env, python_job(env, "ID = '/workspace/' + " + py(name) + "\n", R"PY(RUN('id -u', [ID, '-u'])
RUN('id', [ID])
)PY"));
    const std::string uid = std::to_string(env.job_uid);
    Verdict v = judge_lines(r, {{"id -u", {"OK: " + uid}}}, {"id"});
    if (v.result == Result::kStopped && r.out.find("euid=0") != std::string::npos) return through(v.evidence);
    return v;
  };
  return a;
}

Attack tiocsti() {
  return probe_attack("tiocsti", "seccomp: ioctl TIOCSTI refused", "inject input into the job's own terminal (TIOCSTI)",
                      nullptr, R"PY(import pty, fcntl, termios
m, s = pty.openpty()
name = os.ttyname(s)
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(name, os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b'x')
        os._exit(0)
    except OSError as e:
        os._exit(e.errno)
_, st = os.waitpid(pid, 0)
c = os.waitstatus_to_exitcode(st)
P('TIOCSTI on the controlling terminal', 'OK' if c == 0 else errno.errorcode.get(c, c))
)PY",
                      {{"TIOCSTI on the controlling terminal", {"EPERM"}}});
}

Attack other_caller() {
  Attack a;
  a.id = "other-caller-workspace";
  a.control = "only the job's own workspace is bound (empty root)";
  a.description = "read a file in another caller's workspace (made by a job of caller gate-other)";
  a.run = [](AttackEnv& env) {
    const std::string canary = "gate-other-canary-" + env.new_marker();
    JobRequest other;
    other.workspace_key = env.workspace_key;
    other.command = "printf '%s' \"$0\" > secret.txt && chmod 0644 secret.txt";
    other.argv = {"/bin/sh", "-c", other.command, canary};
    other.timeout_s = 30;
    auto made = env.run_job_as_other(other, 60'000);
    const std::string host_file = env.other_workspace + "/secret.txt";
    if (!made.exited(0) || read_host(host_file) != canary) {
      return inconclusive("the other caller's job did not write " + host_file + ": " + made.outcome_text() + " " + tail(made.err));
    }
    const std::string rel = "/workspace/.." + env.other_workspace.substr(env.workspace_root.size()) + "/secret.txt";
    auto r = run(env, python_job(env, fmt::format("HOST = {}\nREL = {}\n", py(host_file), py(rel)),
                                 R"PY(T('read ' + HOST, lambda: R(HOST))
T('read ' + REL, lambda: R(REL))
)PY"));
    if (r.out.find(canary) != std::string::npos) return through("the other caller's secret was read");
    return judge_lines(r, {{"read " + host_file, {"ENOENT"}}, {"read " + rel, {"ENOENT"}}});
  };
  return a;
}

// An untrusted job in workspace `key` (on the host at `host_dir`) that writes a canary there;
// `ran`: the canary was written or the job started at all.
struct CanaryRun {
  JobResult job;
  bool ran = false;
};
CanaryRun untrusted_canary_job(AttackEnv& env, const std::string& key, const std::string& host_dir) {
  const std::string name = "gate-screen-canary-" + env.new_marker();
  JobRequest rq;
  rq.workspace_key = key;
  rq.untrusted = true;
  rq.argv = {"/bin/sh", "-c", "echo ran > /workspace/$0", name};
  rq.timeout_s = 30;
  CanaryRun c{run(env, rq), false};
  const std::string host_file = host_dir + "/" + name;
  c.ran = read_host(host_file) == "ran\n" ||
          (c.job.have_terminal && c.job.outcome.kind != protocol::Outcome::Kind::kRefusedBeforeStart);
  ::unlink(host_file.c_str());
  return c;
}

// The change screen (docs/change-screen.md): a job of an untrusted run whose workspace's change
// did not pass the screen must not start. The gate's workspace was never prepared as untrusted.
Attack unscreened_untrusted_job() {
  Attack a;
  a.id = "untrusted-unscreened-job";
  a.control = "change screen: an untrusted run needs a workspace whose change passed it";
  a.description = "an untrusted run on a workspace whose change was never screened writes a canary";
  a.run = [](AttackEnv& env) {
    auto [r, ran] = untrusted_canary_job(env, env.workspace_key, env.workspace);
    if (ran) return through("the job ran: " + r.outcome_text());
    if (r.outcome.reason != "screen_refused") return inconclusive("not refused by the screen: " + r.outcome_text());
    return stopped("refused before start: " + r.outcome_text());
  };
  return a;
}

// A trusted job of the gate makes the bundle of a real change (a docs base, then a build.rs on
// top) in its workspace; the gate prepares it as an untrusted workspace and asks for an untrusted
// job in it. Both must be refused: the job's canary is never written.
constexpr const char* kScreenBundleScript = R"sh(set -e
d=$(mktemp -d) && cd "$d" && export HOME="$d"
export GIT_AUTHOR_NAME=gate GIT_AUTHOR_EMAIL=gate@localhost GIT_COMMITTER_NAME=gate GIT_COMMITTER_EMAIL=gate@localhost
git init -q . && echo '# docs' > README.md && git add README.md && git commit -qm base
base=$(git rev-parse HEAD)
echo 'fn main() { std::fs::write("/workspace/canary", "ran").unwrap(); }' > build.rs
git add build.rs && git commit -qm change && git update-ref refs/motor/synthetic HEAD
git bundle create -q "/workspace/$0" refs/motor/synthetic
echo "$base $(git rev-parse HEAD) $(git rev-parse 'HEAD^{tree}')"
)sh";

// A workspace of the gate's own, prepared from the bundle a job of the gate makes
// (kScreenBundleScript): the transfer as the client does it, on a fresh session.
struct GatePrepare {
  std::string key, base, commit, tree;
  std::string reason;  // "prepared", a refusal reason, or "" when the gate could not get that far
  std::string detail;  // the prepare's refusal_detail (the screen's reasons), if any
  std::string error;   // what stopped the gate itself (then the attack is inconclusive)
};

GatePrepare prepare_gate_workspace(AttackEnv& env, const std::string& key, bool untrusted) {
  GatePrepare out;
  out.key = key;
  const std::string bundle_name = key + ".bundle";
  JobRequest make;
  make.workspace_key = env.workspace_key;
  make.argv = {"/bin/sh", "-c", kScreenBundleScript, bundle_name};
  make.timeout_s = 60;
  auto made = run(env, make);
  const std::string bundle_path = env.workspace + "/" + bundle_name;
  const std::string bundle = read_host(bundle_path);
  ::unlink(bundle_path.c_str());
  std::istringstream ids(made.out);
  ids >> out.base >> out.commit >> out.tree;
  if (!made.exited(0) || bundle.empty() || !protocol::is_object_id(out.tree)) {
    out.error = "the gate's job could not make the bundle: " + made.outcome_text() + " " + tail(made.err);
    return out;
  }
  auto session = GateSession::connect_socket(env.socket_path);
  if (!session) {
    out.error = "cannot reach the runner: " + session.error().message;
    return out;
  }
  auto& s = **session;
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", key).field("repository_root", "/gate/" + key).field("tree_hash", out.tree);
  if (untrusted) w.field("untrusted", true).field("screen_base", out.base);
  w.end_object();
  auto first = s.call("workspace.prepare", w.str(), 60'000);
  simdjson::dom::parser parser;
  std::string_view transfer;
  if (!first || parser.parse(*first)["transfer_id"].get_string().get(transfer)) {
    out.error = "workspace.prepare: " + (first ? *first : first.error().message);
    return out;
  }
  const std::string tid(transfer);
  protocol::JsonWriter u;
  u.begin_object().field("transfer_id", tid).field("offset", 0).key("data").base64(bundle).end_object();
  auto uploaded = s.call("workspace.upload", u.str(), 60'000);
  protocol::JsonWriter f;
  f.begin_object().field("transfer_id", tid).field("commit", out.commit).field("bundle_bytes", bundle.size()).end_object();
  auto finished = uploaded ? s.call("workspace.finish", f.str(), 120'000) : uploaded;
  out.reason = "?";
  std::string_view reason, detail;
  if (finished && !parser.parse(*finished)["refusal_detail"].get_string().get(detail)) out.detail = std::string(detail);
  if (finished && !parser.parse(*finished)["outcome"]["reason"].get_string().get(reason)) out.reason = std::string(reason);
  else if (finished && finished->find("\"prepared\"") != std::string::npos) out.reason = "prepared";
  return out;
}

void drop_gate_workspace(AttackEnv& env, const std::string& key) {
  if (auto session = GateSession::connect_socket(env.socket_path)) {
    (void)(*session)->call("workspace.drop", fmt::format(R"({{"workspace_key":"{}"}})", key), 60'000);
  }
}

Attack screened_code_change() {
  Attack a;
  a.id = "untrusted-code-change";
  a.control = "change screen: an untrusted prepare of a code change is refused before the checkout";
  a.description = "prepare an untrusted workspace whose change adds build.rs, then run an untrusted job in it";
  a.run = [](AttackEnv& env) {
    const std::string key = "gate-screen-" + env.new_marker();
    const GatePrepare prepared = prepare_gate_workspace(env, key, true);
    if (!prepared.error.empty()) return inconclusive(prepared.error);
    // The untrusted job either way: it must not run.
    auto [r, ran] = untrusted_canary_job(env, key, gate_workspace_dir(env, key));
    drop_gate_workspace(env, key);
    if (ran) return through(fmt::format("the prepare: {}; the job ran: {}", prepared.reason, r.outcome_text()));
    if (prepared.reason != "screen_refused" || r.outcome.reason != "screen_refused") {
      return inconclusive(fmt::format("the prepare: {}; the job: {}", prepared.reason, r.outcome_text()));
    }
    return stopped("the prepare and the job were refused (screen_refused): " + tail(prepared.detail, 200));
  };
  return a;
}

// The runner's changed-path scan after a job, in a workspace the gate prepared (issue 15 items 1
// and 2): `plant` runs as the job; `judge` reads its terminal record (or its absence).
Attack scan_attack(std::string id, std::string control, std::string description, std::string plant, std::string memory,
                   std::function<Verdict(const JobResult&)> judge) {
  Attack a;
  a.id = std::move(id);
  a.control = std::move(control);
  a.description = std::move(description);
  a.run = [plant = std::move(plant), memory = std::move(memory), judge = std::move(judge)](AttackEnv& env) {
    const std::string key = "gate-scan-" + env.new_marker();
    const GatePrepare prepared = prepare_gate_workspace(env, key, false);
    if (!prepared.error.empty()) return inconclusive(prepared.error);
    if (prepared.reason != "prepared") return inconclusive("the gate's workspace was not prepared: " + prepared.reason);
    JobRequest rq;
    rq.workspace_key = key;
    rq.argv = {"/bin/sh", "-c", plant};
    rq.memory = memory;
    rq.timeout_s = 60;
    // The scan runs after the job and before its terminal record: a scan that blocks shows as a
    // record that does not come (the job itself ends in seconds).
    const JobResult r = env.run_job(rq, kScanWaitMs, {});
    drop_gate_workspace(env, key);
    // A scan that blocked keeps the workspace busy and the drop is refused: the gate removes it
    // from the host itself (remove_all follows no symlink).
    std::error_code ec;
    fs::remove_all(gate_workspace_dir(env, key), ec);
    return judge(r);
  };
  return a;
}

// The terminal record's workspace_changes, or "<none>" without a record.
std::string workspace_changes(const JobResult& r) {
  if (!r.have_terminal) return "<none>";
  simdjson::dom::parser parser;
  simdjson::dom::element changes;
  if (parser.parse(r.terminal_json)["workspace_changes"].get(changes)) return "<missing>";
  return simdjson::minify(changes);
}

Attack scan_fifo() {
  return scan_attack(
      "scan-fifo", "the scan's helper masks FIFO/device .gitignore files (git would block opening one)",
      "leave a FIFO named .gitignore in an untracked folder for the runner's git status",
      "mkdir -p /workspace/untracked && mkfifo /workspace/untracked/.gitignore && echo more >> /workspace/README.md", "",
      [](const JobResult& r) {
        if (!r.have_terminal) {
          return through(fmt::format("no terminal record {} s after the job was sent: the scan blocked on the FIFO "
                                     "(the workspace stays busy, its queue waits)", kScanWaitMs / 1000));
        }
        const std::string changes = workspace_changes(r);
        if (changes != R"(["README.md"])") return inconclusive("the scan did not report the edit: workspace_changes " + changes);
        return stopped("the scan finished and reported " + changes + " (" + r.outcome_text() + ")");
      });
}

Attack scan_memory() {
  Attack a = scan_attack(
      "scan-memory", "the scan runs in a cgroup charged the job's memory limit",
      "plant 160 MiB of ignore patterns for the scan's git from a job limited to 64M",
      "mkdir -p /workspace/big && yes '/a-long-ignore-pattern-that-git-must-keep-in-memory-*.o' | head -c 160M > "
      "/workspace/big/.gitignore",
      "64M", [](const JobResult& r) {
        if (!r.have_terminal) return inconclusive("no terminal record: " + r.error);
        const std::string changes = workspace_changes(r);
        if (changes == "null") return stopped("the scan was stopped at the job's limit: workspace_changes null");
        return through("the scan loaded 160 MiB of patterns past the job's 64M: workspace_changes " + changes);
      });
  a.needs = "memory controller";
  a.skip = [](const AttackEnv& env) { return need(env.facts.memory_controller, "memory cgroup controller"); };
  return a;
}

Attack dotdot() {
  Attack a;
  a.id = "fs-dotdot";
  a.control = "workspace bound alone; read-only root";
  a.description = "create files outside the workspace through ..";
  a.run = [](AttackEnv& env) {
    const std::string m = env.new_marker();
    const std::string name = "gate-escape-" + m;
    auto r = run(env, python_job(env, "NAME = " + py(name) + "\n", R"PY(T('create /workspace/../' + NAME, lambda: W('/workspace/../' + NAME, True))
T('create /workspace/../../../tmp/../' + NAME, lambda: W('/workspace/../../../tmp/../' + NAME, True))
)PY"));
    const fs::path ws(env.workspace);
    for (const auto& p : {ws.parent_path() / name, ws.parent_path().parent_path() / name, fs::path("/") / name}) {
      std::error_code ec;
      if (fs::exists(p, ec)) {
        fs::remove(p, ec);
        return through("the job created " + p.string() + " on the host (removed)");
      }
    }
    return judge_lines(r, {{"create /workspace/../" + name, {"EROFS"}}, {"create /workspace/../../../tmp/../" + name, {"EROFS"}}});
  };
  return a;
}

Attack symlink_out() {
  Attack a;
  a.id = "fs-symlink";
  a.control = "only the job's own workspace is bound (empty root)";
  a.description = "follow symlinks planted in the workspace to a host directory and to /etc/shadow";
  a.run = [](AttackEnv& env) {
    const std::string m = env.new_marker();
    const std::string dir_link = "gate-link-dir-" + m, shadow_link = "gate-link-shadow-" + m;
    std::error_code ec;
    fs::create_directory_symlink(env.outside_dir, env.workspace + "/" + dir_link, ec);
    if (ec) return inconclusive("could not plant " + dir_link + ": " + ec.message());
    fs::create_symlink("/etc/shadow", env.workspace + "/" + shadow_link, ec);
    if (ec) return inconclusive("could not plant " + shadow_link + ": " + ec.message());
    const std::string target = "pwned-" + m;
    auto r = run(env, python_job(env, fmt::format("D = '/workspace/' + {}\nS = '/workspace/' + {}\nF = {}\n", py(dir_link),
                                                  py(shadow_link), py(target)),
                                 R"PY(T('write through the link to ' + os.readlink(D), lambda: W(D + '/' + F, True))
T('read through the link to /etc/shadow', lambda: R(S))
)PY"));
    if (fs::exists(env.outside_dir + "/" + target, ec)) {
      return through("the job wrote " + env.outside_dir + "/" + target + " on the host");
    }
    return judge_lines(r, {{"write through the link to " + env.outside_dir, {"ENOENT"}},
                           {"read through the link to /etc/shadow", {"ENOENT"}}});
  };
  return a;
}

Attack hardlink() {
  Attack a;
  a.id = "fs-hardlink";
  a.control = "only the job's own workspace is bound; other mounts are separate filesystems";
  a.description = "hard-link a host file (world-writable, beside the workspace), /usr/bin/id and /etc/passwd into the workspace";
  a.run = [](AttackEnv& env) {
    const std::string m = env.new_marker();
    const std::string target = env.outside_dir + "/target-" + m;
    std::ofstream(target) << "gate hard-link target\n";
    chmod(target.c_str(), 0666);
    auto r = run(env, python_job(env, fmt::format("HOST = {}\nM = {}\n", py(target), py(m)),
                                 R"PY(T('link ' + HOST, lambda: os.link(HOST, '/workspace/gate-hl-1-' + M))
T('link /usr/bin/id', lambda: os.link('/usr/bin/id', '/workspace/gate-hl-2-' + M))
T('link /etc/passwd', lambda: os.link('/etc/passwd', '/workspace/gate-hl-3-' + M))
)PY"));
    struct stat st {};
    if (stat(target.c_str(), &st) == 0 && st.st_nlink > 1) return through("the host file " + target + " gained a link");
    return judge_lines(r, {{"link " + target, {"ENOENT"}},
                           {"link /usr/bin/id", {"EXDEV", "EPERM"}},
                           {"link /etc/passwd", {"EXDEV", "EPERM"}}});
  };
  return a;
}

Attack write_caches() {
  Attack a;
  a.id = "write-caches";
  a.control = "shared caches bound read-only";
  a.description = "create a file in each shared cache (cache_paths)";
  a.needs = "shared caches configured";
  // A config without cache_paths gives no job a cache to write: a host-level skip.
  const Verdict no_caches{Result::kSkipped, "no shared caches configured", true};
  a.skip = [no_caches](const AttackEnv& env) {
    return env.config->cache_paths.empty() ? std::optional<Verdict>(no_caches) : std::nullopt;
  };
  a.run = [](AttackEnv& env) {
    const std::string name = "gate-cache-probe-" + env.new_marker();
    std::string list = "CACHES = [";
    for (const auto& c : env.config->cache_paths) list += py(c) + ", ";
    list += "]\nNAME = " + py(name) + "\n";
    auto r = run(env, python_job(env, list, R"PY(for c in CACHES:
    T('create in ' + c, lambda c=c: W(c + '/' + NAME, True))
)PY"));
    std::vector<std::string> appeared;
    for (const auto& c : env.config->cache_paths) {
      std::error_code ec;
      if (fs::remove(c + "/" + name, ec)) appeared.push_back(c + "/" + name);
    }
    if (!appeared.empty()) return through(fmt::format("the job created {} on the host (removed)", fmt::join(appeared, ", ")));
    std::vector<Expect> ex;
    for (const auto& c : env.config->cache_paths) ex.push_back({"create in " + c, {"EROFS"}});
    return judge_lines(r, ex);
  };
  return a;
}

Attack sysv_ipc() {
  Attack a;
  a.id = "sysv-ipc";
  a.control = "own IPC namespace";
  a.description = "open a SysV message queue the gate made on the host (world-writable)";
  a.skip = need_x86_64;
  a.run = [](AttackEnv& env) {
    // A key of our own, the queue 0666 so that only the namespace can keep the job from it.
    const key_t key = static_cast<key_t>(0x6d740000 | (std::atoi(env.new_marker().c_str() + 6) & 0xffff));
    const int queue = msgget(key, IPC_CREAT | IPC_EXCL | 0666);
    if (queue < 0) return inconclusive(fmt::format("could not make a message queue with key {:#x}: {}", key, std::strerror(errno)));
    auto r = run(env, python_job(env, fmt::format("KEY = {}\n", key), "T('msgget the host queue', lambda: SC(68, KEY, 0))\n"));
    msgctl(queue, IPC_RMID, nullptr);
    return judge_lines(r, {{"msgget the host queue", {"ENOENT"}}});
  };
  return a;
}

Attack hostname() {
  Attack a;
  a.id = "hostname";
  a.control = "own UTS namespace; no CAP_SYS_ADMIN";
  a.description = "read and change the hostname";
  a.run = [](AttackEnv& env) {
    auto r = run(env, python_job(env, "", R"PY(P('nodename', os.uname().nodename)
T('sethostname', lambda: socket.sethostname('gate-pwned'))
RUN('hostname(1)', ['hostname', 'gate-pwned'])
)PY"));
    const std::string now = host_name();
    if (now != env.host_hostname) return through("the host's hostname changed to " + now);
    Verdict v = judge_lines(r, {{"sethostname", {"EPERM"}}, {"hostname(1)", {"failed*"}}}, {"nodename"});
    const auto got = parse_result_lines(r.out);
    if (v.result == Result::kStopped && got.count("nodename") && got.at("nodename") == env.host_hostname) {
      return through("the job sees the host's hostname " + env.host_hostname + ": it shares the host's UTS namespace");
    }
    return v;
  };
  return a;
}

Attack cgroup_files() {
  Attack a;
  a.id = "cgroup-files";
  a.control = "no /sys; own cgroup namespace; no CAP_SYS_ADMIN";
  a.description = "write the runner's cgroup files and mount a cgroup filesystem";
  a.run = [](AttackEnv& env) {
    std::vector<std::string> paths;
    for (const auto& mnt : env.facts.cgroup_mounts) paths.push_back(mnt + "/" + env.cgroup_parent + "/cgroup.procs");
    if (paths.empty()) paths.push_back("/sys/fs/cgroup/cgroup.procs");
    std::string list = "PATHS = [";
    for (const auto& p : paths) list += py(p) + ", ";
    list += "]\n";
    auto r = run(env, python_job(env, list + "PARENT = " + py_split(env.cgroup_parent) + "\n", R"PY(for p in PATHS:
    T('open for writing ' + p, lambda p=p: OW(p))
T('mount cgroup2', lambda: SC(165, b'none', b'/tmp', b'cgroup2', 0, 0))
with open('/proc/self/cgroup') as f:
    lines = f.read().split()
P('host cgroup paths in /proc/self/cgroup', 'visible' if any(PARENT in l for l in lines) else 'absent')
)PY"));
    std::vector<Expect> ex;
    for (const auto& p : paths) ex.push_back({"open for writing " + p, {"ENOENT"}});
    ex.push_back({"mount cgroup2", {"EPERM"}});
    ex.push_back({"host cgroup paths in /proc/self/cgroup", {"absent"}});
    return judge_lines(r, ex);
  };
  a.skip = need_x86_64;
  return a;
}

Attack runner_memory() {
  Attack a = probe_attack(
      "runner-memory", "own PID namespace; seccomp (process_vm_readv)", "read the runner's memory through /proc",
      [](const AttackEnv& env) { return fmt::format("RPID = {}\n", env.runner_pid); },
      R"PY(T('stat /proc/%d (the runner)' % RPID, lambda: os.stat('/proc/%d' % RPID) and None)
T('read /proc/%d/mem' % RPID, lambda: R('/proc/%d/mem' % RPID))
seen = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            with open('/proc/%s/cmdline' % p, 'rb') as f:
                if ('motor-' 'runner').encode() in f.read():
                    seen.append(p)
        except OSError:
            pass
P('a runner process', 'visible as %s' % seen if seen else 'absent')
T('process_vm_readv of the runner', lambda: SC(310, RPID, 0, 0, 0, 0, 0))
)PY",
      ExpectsFn([](const AttackEnv& env) {
        return std::vector<Expect>{{fmt::format("stat /proc/{} (the runner)", env.runner_pid), {"ENOENT"}},
                                   {fmt::format("read /proc/{}/mem", env.runner_pid), {"ENOENT"}},
                                   {"a runner process", {"absent"}},
                                   {"process_vm_readv of the runner", {"EPERM"}}};
      }));
  a.skip = need_x86_64;
  return a;
}

Attack dns() {
  Attack a;
  a.id = "dns";
  a.control = "own network namespace (loopback only, no resolver)";
  a.description = "resolve a name, and query the host's own resolver over UDP and TCP";
  a.run = [](AttackEnv& env) {
    // The host's first IPv4 nameserver: the one a job would use if it shared the host's network.
    std::string ns = "192.0.2.53";
    std::istringstream conf(read_host("/etc/resolv.conf"));
    for (std::string line; std::getline(conf, line);) {
      std::istringstream words(line);
      std::string key, value;
      if (words >> key >> value && key == "nameserver" && value.find(':') == std::string::npos) {
        ns = value;
        break;
      }
    }
    auto r = run(env, python_job(env, "NS = " + py(ns) + "\n", R"PY(Q = b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01'
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.connect((NS, 53))
        s.send(Q)
        return 'answered (%d bytes)' % len(s.recv(512))
    finally:
        s.close()
def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((NS, 53))
    finally:
        s.close()
T('getaddrinfo example.com', lambda: socket.getaddrinfo('example.com', 80)[0][4][0])
T('udp query to the host resolver', udp)
T('tcp connect to the host resolver', tcp)
T('read /etc/resolv.conf', lambda: R('/etc/resolv.conf'))
)PY"));
    // A loopback resolver address reaches the job's own (empty) loopback: refused. Any other is
    // unreachable from a namespace that has only lo.
    const bool loopback = ns.rfind("127.", 0) == 0;
    const std::vector<std::string> sig = {loopback ? "ECONNREFUSED" : "ENETUNREACH"};
    return judge_lines(r, {{"getaddrinfo example.com", {"EAI(*"}},
                           {"udp query to the host resolver", sig},
                           {"tcp connect to the host resolver", sig}},
                       {"read /etc/resolv.conf"});
  };
  return a;
}


// --- outbound network (issue 9): only where the config lets jobs ask for it --------------------
// The egress policy drops silently, so a dropped connect times out; "timeout" alone would also be
// what an unrouted address does. The evidence is the policy's own drop counter in the runner's
// egress namespace, read before and after the attack: the drop rule must be what stopped it.
// And where the targets can be reached without touching an outside address, the gate listens
// there itself (arrival_listeners.hpp): the job also sends UDP to those listeners, and a datagram
// that arrives is GOT THROUGH, whatever the job's connects reported.

std::optional<Verdict> need_outbound(const AttackEnv& env) {
  if (env.config && env.config->outbound_network) return std::nullopt;
  return Verdict{Result::kSkipped, "outbound_network is off: outbound jobs are refused (network_unsupported)", true};
}

// Packets a named drop counter of the gate runner's egress ruleset counted; -1 if unreadable.
int64_t egress_drops(const AttackEnv& env, const std::string& counter) {
  const std::string path = "/run/netns/motor-eg-" + netpolicy::egress_tag(env.state_dir);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  if (!fd || !netpolicy::run_tool({"nft", "list", "counter", "inet", "motor_egress", counter}, fd.get(), "", &out)) return -1;
  const size_t at = out.find("packets ");
  return at == std::string::npos ? -1 : std::atoll(out.c_str() + at + 8);
}

// The uplink namespace's own IPv4 addresses (not loopback) and its gateways.
std::vector<std::string> uplink_host_targets(const AttackEnv& env) {
  UniqueFd fd;
  if (!env.config->outbound_uplink_netns.empty())
    fd.reset(open(("/run/netns/" + env.config->outbound_uplink_netns).c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<std::string> out;
  if (auto addrs = netpolicy::namespace_addresses(fd.get())) {
    for (Ipv4 a : *addrs) {
      if ((a >> 24) != 127) out.push_back(format_ipv4(a));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

constexpr std::string_view kConnectAll = R"PY(import threading
def _tcp(label, host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(4)
    try:
        s.connect((host, port))
        P(label, 'OK connected')
    except socket.timeout:
        P(label, 'timeout')
    except BaseException as e:
        P(label, _en(e))
    finally:
        s.close()
def SEND_ALL(targets):
    for h, p in targets:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for _ in range(3): s.sendto(b'motor-gate', (h, p))
        except BaseException:
            pass
        finally:
            s.close()
def CONNECT_ALL(targets):
    ts = [threading.Thread(target=_tcp, args=('tcp %s:%d' % (h, p), h, p)) for h, p in targets]
    for t in ts: t.start()
    for t in ts: t.join()
)PY";

// Where the gate listens for what gets through: on the host's own addresses, or in a namespace
// of its own behind the uplink that only the gate runner's jobs reach.
enum class Listen { kOnUplink, kBehindUplink };

// Every target must time out, nothing may arrive at the gate's listeners, and the named drop
// counter must have grown by at least one packet per target.
Attack outbound_connect_attack(std::string id, std::string control, std::string description, std::string counter,
                               Listen where, std::function<std::vector<std::string>(const AttackEnv&)> targets) {
  Attack a;
  a.id = std::move(id);
  a.control = std::move(control);
  a.description = std::move(description);
  a.needs = "outbound_network = true";
  a.skip = need_outbound;
  a.run = [counter = std::move(counter), where, targets = std::move(targets)](AttackEnv& env) {
    const auto hosts = targets(env);
    if (hosts.empty()) return inconclusive("no target addresses found");
    const std::string& uplink = env.config->outbound_uplink_netns;
    auto listeners = where == Listen::kOnUplink
                         ? ArrivalListeners::on_uplink(uplink, hosts)
                         : ArrivalListeners::behind_uplink(uplink, netpolicy::egress_tag(env.state_dir), hosts);
    if (!listeners) return inconclusive("the gate could not make its listeners: " + listeners.error().message);
    std::string list, sends;
    std::vector<Expect> expects;
    for (const auto& h : hosts) {
      list += fmt::format("({}, 80), ", py(h));
      sends += fmt::format("({}, {}), ", py(h), (*listeners)->port());
      expects.push_back({fmt::format("tcp {}:80", h), {"timeout"}});
    }
    const int64_t before = egress_drops(env, counter);
    JobRequest rq = python_job(env, "", std::string(kConnectAll) + "SEND_ALL([" + sends + "])\nCONNECT_ALL([" + list + "])\n");
    rq.network = "outbound";
    Verdict v = judge_lines(run(env, rq), expects);
    const int64_t after = egress_drops(env, counter);
    if (const auto arrived = (*listeners)->arrived(); !arrived.empty())
      return through(fmt::format("datagrams from the job arrived at the gate's listeners on {} (port {}); {}",
                                 fmt::join(arrived, ", "), (*listeners)->port(), v.evidence));
    if (v.result != Result::kStopped) return v;
    if (before < 0 || after - before < static_cast<int64_t>(hosts.size()))
      return through(fmt::format("the connects timed out but the policy's {} counter went {} -> {}: something else "
                                 "stopped them; {}", counter, before, after, v.evidence));
    v.evidence += fmt::format("; {} counted {} more packets; nothing arrived at the gate's UDP listeners (port {})", counter,
                              after - before, (*listeners)->port());
    return v;
  };
  return a;
}

Attack outbound_ipv6() {
  Attack a = probe_attack("net-outbound-ipv6", "outbound job: no IPv6 (sysctls in the job's namespace, ruleset drops IPv6)",
                          "list IPv6 addresses, connect over IPv6 to ::1 and 2001:db8::1", nullptr,
                          R"PY(T('ipv6 addresses', lambda: len(open('/proc/net/if_inet6').read().split()))
def c6(host):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        s.connect((host, 80))
    finally:
        s.close()
T('udp connect [::1]:80', lambda: c6('::1'))
T('udp connect [2001:db8::1]:80', lambda: c6('2001:db8::1'))
)PY",
                          ExpectsFn([](const AttackEnv&) {
                            return std::vector<Expect>{{"ipv6 addresses", {"OK 0"}},
                                                       {"udp connect [::1]:80", {"EADDRNOTAVAIL", "ENETUNREACH"}},
                                                       {"udp connect [2001:db8::1]:80", {"ENETUNREACH", "EADDRNOTAVAIL"}}};
                          }));
  auto inner = a.run;
  a.run = [inner](AttackEnv& env) {
    // probe_attack runs offline jobs: this one asks for outbound.
    RunJob original = env.run_job;
    env.run_job = [original](const JobRequest& rq, int ms, const std::function<void(const std::string&)>& f) {
      JobRequest out = rq;
      out.network = "outbound";
      return original(out, ms, f);
    };
    Verdict v = inner(env);
    env.run_job = original;
    return v;
  };
  a.needs = "outbound_network = true";
  a.skip = need_outbound;
  return a;
}

// Asks the upstream resolver (from the uplink namespace, as the runner does) for `name`; its
// A addresses, or none.
std::vector<uint32_t> upstream_addresses(const AttackEnv& env, const std::string& name) {
  std::vector<Ipv4> servers;
  for (const auto& r : env.config->outbound_resolvers) servers.push_back(*parse_ipv4(r));
  if (servers.empty()) servers = netpolicy::resolv_conf_nameservers(read_host("/etc/resolv.conf"));
  if (servers.empty()) return {};
  UniqueFd uplink;
  if (!env.config->outbound_uplink_netns.empty())
    uplink.reset(open(("/run/netns/" + env.config->outbound_uplink_netns).c_str(), O_RDONLY | O_CLOEXEC));
  auto sock = netpolicy::socket_in_netns(uplink ? uplink.get() : -1, SOCK_DGRAM);
  auto q = netpolicy::make_dns_query(0x5a5a, name);
  auto parsed = q ? netpolicy::parse_dns_query(*q) : Expected<netpolicy::DnsQuery>(make_error("dns", "bad name"));
  if (!sock || !parsed) return {};
  const UniqueFd& s = *sock;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  to.sin_addr.s_addr = htonl(servers[0]);
  timeval tv{2, 0};
  setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 || send(s.get(), q->data(), q->size(), 0) < 0) return {};
  std::string buf(65535, '\0');
  const ssize_t n = recv(s.get(), buf.data(), buf.size(), 0);
  if (n <= 0) return {};
  auto out = netpolicy::filter_dns_response(std::string_view(buf.data(), static_cast<size_t>(n)), *parsed, 0x5a5a,
                                         [](uint32_t) { return false; }, 65535);
  return out ? netpolicy::dns_answer_addresses(*out) : std::vector<uint32_t>{};
}

Attack outbound_dns_private() {
  Attack a;
  a.id = "net-outbound-dns-private";
  a.control = "outbound job: the resolver removes addresses the policy drops";
  a.description = "resolve names the upstream resolver answers with private or link-local addresses";
  a.needs = "outbound_network = true, and a name the upstream answers privately";
  a.skip = need_outbound;
  a.run = [](AttackEnv& env) {
    const netpolicy::EgressPolicy policy;
    std::vector<std::string> names;
    for (std::string n : {std::string("localhost"), std::string("metadata.google.internal"), std::string("instance-data"),
                          std::string("metadata"), env.host_hostname}) {
      if (n.empty()) continue;
      for (uint32_t addr : upstream_addresses(env, n)) {
        if (policy.drops(addr)) {
          names.push_back(n);
          break;
        }
      }
    }
    if (names.empty())
      return Verdict{Result::kSkipped, "the upstream resolver answers none of the candidate names with a blocked address", true};
    std::string list;
    std::vector<Expect> expects;
    for (const auto& n : names) {
      list += "T('resolve " + n + "', lambda: sorted({a[4][0] for a in socket.getaddrinfo(" + py(n) + ", 80, socket.AF_INET)})); ";
      expects.push_back({"resolve " + n, {"EAI(-5)", "EAI(-2)", "EAI(-3)"}});
    }
    JobRequest rq = python_job(env, "", list + "\n");
    rq.network = "outbound";
    auto r = run(env, rq);
    Verdict v = judge_lines(r, expects);
    if (v.result != Result::kGotThrough) return v;
    // Public addresses beside the stripped ones are fine: only a blocked address breaks it.
    for (const auto& [label, value] : parse_result_lines(r.out)) {
      for (size_t at = 0; (at = value.find('\'', at)) != std::string::npos;) {
        const size_t end = value.find('\'', at + 1);
        if (end == std::string::npos) break;
        if (auto addr = parse_ipv4(value.substr(at + 1, end - at - 1)); addr && policy.drops(*addr)) return v;
        at = end + 1;
      }
    }
    return stopped("only addresses the policy allows were answered: " + v.evidence);
  };
  return a;
}

// Socket buffers charged to the job: loopback TCP connections and UDP sockets the job never reads,
// filled until the kernel stops queueing (or the gate's ceiling), in a job limited to 64M.
Attack socket_buffers() {
  Attack a;
  a.id = "socket-buffers";
  a.control = "socket buffers charged to the job's memory (v1 memory.kmem.tcp.limit_in_bytes; v2 memory.max)";
  a.description = "queue loopback TCP and UDP buffers nobody reads in a job limited to 64M";
  a.needs = "memory controller";
  a.skip = [](const AttackEnv& env) { return need(env.facts.memory_controller, "memory cgroup controller"); };
  a.run = [](AttackEnv& env) {
    JobRequest rq = python_job(env, fmt::format("CEILING = {}\n", kSocketCeilingMiB << 20), R"PY(socket.setdefaulttimeout(5)
buf = b'x' * 65536
socks = []
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen(512)
tcp = 0
while tcp < CEILING and len(socks) < 600:
    c = socket.socket()
    c.connect(srv.getsockname())
    s, _ = srv.accept()
    c.setblocking(False)
    socks += [c, s]
    sent = 0
    try:
        while tcp < CEILING:
            n = c.send(buf)
            sent += n
            tcp += n
    except OSError:
        pass
    if sent < 65536:
        break
P('tcp queued MiB', tcp >> 20)
for x in socks:
    x.close()
socks = []
time.sleep(0.5)  # the closed connections' buffers are freed (and uncharged) first
def udp_queued():
    total = 0
    for line in open('/proc/net/udp').read().splitlines()[1:]:
        total += int(line.split()[4].split(':')[1], 16)
    return total
udp = 0
while udp < CEILING and len(socks) < 1200:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    r.bind(('127.0.0.1', 0))
    w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    w.setblocking(False)
    socks += [r, w]
    before = udp_queued()
    for i in range(256):
        try:
            w.sendto(buf[:60000], r.getsockname())
        except OSError:
            break
    udp = udp_queued()
    if udp - before < 65536:
        break
P('udp queued MiB', udp >> 20)
)PY");
    rq.memory = "64M";
    auto r = run(env, rq);
    if (auto v = not_run(r)) return *v;
    const auto got = parse_result_lines(r.out);
    if (!got.count("tcp queued MiB") || !got.count("udp queued MiB")) {
      if (r.oom_killed) return stopped("the job was OOM-killed while queueing socket buffers: they are charged to it");
      return inconclusive("no result (" + r.outcome_text() + "; stderr: " + tail(r.err) + ")");
    }
    const long tcp = std::atol(got.at("tcp queued MiB").c_str()), udp = std::atol(got.at("udp queued MiB").c_str());
    const std::string what = fmt::format("queued {} MiB of TCP and {} MiB of UDP buffers in a 64M job", tcp, udp);
    if (tcp >= kSocketBoundMiB || udp >= kSocketBoundMiB) {
      return through(what + fmt::format(" (at least {} MiB: socket buffers are not charged to the job)", kSocketBoundMiB));
    }
    return stopped(what + fmt::format(" (below {} MiB: the kernel stopped queueing at the job's limit)", kSocketBoundMiB));
  };
  return a;
}

// --cwd resolved inside the workspace: the job plants a symlink to a host directory that exists
// and one to a path that does not; a job with either as its cwd must get the same answer.
Attack cwd_oracle() {
  Attack a;
  a.id = "cwd-oracle";
  a.control = "--cwd resolved beneath the workspace without symlinks (openat2)";
  a.description = "plant symlinks to an existing and a missing host directory and ask for each as the cwd";
  a.run = [](AttackEnv& env) {
    const std::string m = env.new_marker();
    const std::string present = "gate-cwd-present-" + m, missing = "gate-cwd-missing-" + m;
    JobRequest plant = python_job(env, fmt::format("A = {}\nB = {}\nM = {}\n", py(present), py(missing), py(m)),
                                  "os.symlink('/root', '/workspace/' + A)\n"
                                  "os.symlink('/nonexistent-gate-' + M, '/workspace/' + B)\n"
                                  "P('planted', 'yes')\n");
    auto planted = run(env, plant);
    if (auto v = not_run(planted)) return *v;
    if (parse_result_lines(planted.out).count("planted") == 0) return inconclusive("the symlinks were not planted: " + tail(planted.err));
    auto ask = [&](const std::string& cwd) {
      JobRequest rq;
      rq.workspace_key = env.workspace_key;
      rq.argv = {"/bin/true"};
      rq.cwd = cwd;
      rq.timeout_s = 20;
      return run(env, rq);
    };
    const JobResult to_present = ask(present), to_missing = ask(missing);
    std::error_code ec;
    fs::remove(env.workspace + "/" + present, ec);
    fs::remove(env.workspace + "/" + missing, ec);
    for (const auto* r : {&to_present, &to_missing}) {
      if (!r->error.empty() || !r->have_terminal) return inconclusive("a job could not be run: " + r->error);
    }
    const std::string a_text = to_present.outcome_text(), b_text = to_missing.outcome_text();
    const auto refused = protocol::Outcome::Kind::kRefusedBeforeStart;
    // The names differ; the answers may not, apart from the name itself.
    auto unnamed = [](std::string s, const std::string& name) {
      for (size_t at; (at = s.find(name)) != std::string::npos;) s.replace(at, name.size(), "NAME");
      return s;
    };
    if (to_present.outcome.kind != refused || to_missing.outcome.kind != refused ||
        unnamed(a_text, present) != unnamed(b_text, missing)) {
      return through(fmt::format("cwd -> /root (exists on the host): {}; cwd -> a missing path: {}", a_text, b_text));
    }
    return stopped("both refused alike: " + a_text);
  };
  return a;
}
}  // namespace

const char* result_name(Result r) {
  switch (r) {
    case Result::kStopped: return "stopped";
    case Result::kGotThrough: return "GOT THROUGH";
    case Result::kSkipped: return "skipped";
    case Result::kInconclusive: return "INCONCLUSIVE";
  }
  return "?";
}

const char* result_json_name(Result r) {
  switch (r) {
    case Result::kStopped: return "stopped";
    case Result::kGotThrough: return "got_through";
    case Result::kSkipped: return "skipped";
    case Result::kInconclusive: return "inconclusive";
  }
  return "?";
}

std::map<std::string, std::string> parse_result_lines(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && eq > 0) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

// What a job's mount table says about the host (issue 15's mountinfo leak): a bind's root field
// is the bound directory's path within its filesystem, so the workspace's host directory must
// have a name that says nothing (an opaque id), and motor-init must not be a bind at all (it is
// exec'd from an fd). The location of the workspace root within its filesystem stays visible
// (an accepted limit, docs/job-isolation.md): reported, not judged.
Attack mount_view() {
  Attack a;
  a.id = "mount-view";
  a.control = "opaque workspace directory names; motor-init exec'd from an fd, not bound";
  a.description = "look for the caller's name, the workspace key and motor-init's host path in the job's mount tables";
  a.run = [](AttackEnv& env) {
    auto r = run(env, python_job(env, "", R"PY(for p in ('/proc/self/mountinfo', '/proc/self/mounts', '/proc/self/mountstats', '/proc/1/mountinfo'):
    try:
        with open(p, 'rb') as f:
            data = f.read(1 << 20).decode('utf-8', 'replace')
    except BaseException as e:
        P('read ' + p, _en(e))
        continue
    P('read ' + p, 'OK (read %d bytes)' % len(data))
    for i, line in enumerate(data.splitlines()):
        P('%s line %d' % (p, i), line)
        f = line.split(' ')
        if p == '/proc/self/mountinfo' and len(f) > 4 and f[4] == '/workspace':
            P('workspace root', f[3])
)PY"));
    if (auto v = not_run(r)) return *v;
    const auto got = parse_result_lines(r.out);
    const auto root = got.find("workspace root");
    if (root == got.end()) return inconclusive("no /workspace line in the job's mountinfo: " + tail(r.out));
    const std::string init = env.config && !env.config->init_path.empty()
                                 ? env.config->init_path
                                 : env.self_exe.substr(0, env.self_exe.rfind('/')) + "/motor-init";
    std::vector<std::string> seen;
    for (const auto& [what, needle] : std::vector<std::pair<std::string, std::string>>{
             {"the workspace key", env.workspace_key}, {"the caller's name as a directory", "/root/"},
             {"motor-init's host path", init}}) {
      if (r.out.find(needle) != std::string::npos) seen.push_back(fmt::format("{} ({})", what, needle));
    }
    const std::string id = env.workspace.substr(env.workspace.rfind('/') + 1);
    const std::string limit =
        fmt::format("the workspace root's place in its filesystem shows (accepted limit): {}", root->second);
    if (!seen.empty()) return through(fmt::format("the job's mount tables show {}; {}", fmt::join(seen, ", "), limit));
    if (!root->second.ends_with("/" + id)) return through("the workspace's root field is not its opaque id: " + root->second);
    return stopped(fmt::format("neither the key, the caller nor motor-init's path; /workspace is /{}; {}", id, limit));
  };
  return a;
}

std::vector<Attack> attack_catalogue() {
  std::vector<Attack> out;
  // --- the empty root: host files are absent, not just unreadable --------------------------------
  out.push_back(probe_attack("read-shadow", "empty root (tmpfs root, pivot_root, old root detached)",
                             "read the host's /etc/shadow", nullptr,
                             "T('read /etc/shadow', lambda: R('/etc/shadow'))\n",
                             {{"read /etc/shadow", {"ENOENT"}}}));
  out.push_back(probe_attack("read-root-home", "empty root (tmpfs root, pivot_root, old root detached)", "list /root",
                             nullptr, "T('list /root', lambda: len(os.listdir('/root')))\n",
                             {{"list /root", {"ENOENT"}}}));
  {
    Attack a = probe_attack(
        "read-state-dir", "empty root (tmpfs root, pivot_root, old root detached)",
        "read and write the runner's state directory, state.json and socket",
        [](const AttackEnv& env) {
          return fmt::format("STATE = {}\nSOCK = {}\n", py(env.state_dir), py(env.socket_path));
        },
        R"PY(T('stat the state dir', lambda: os.stat(STATE) and None)
T('read state.json', lambda: R(STATE + '/state.json'))
T('list jobs/', lambda: len(os.listdir(STATE + '/jobs')))
T('create a file in the state dir', lambda: W(STATE + '/gate-probe'))
T('stat the socket', lambda: os.stat(SOCK) and None)
)PY",
        {{"stat the state dir", {"ENOENT"}},
         {"read state.json", {"ENOENT"}},
         {"list jobs/", {"ENOENT"}},
         {"create a file in the state dir", {"ENOENT"}},
         {"stat the socket", {"ENOENT"}}});
    out.push_back(std::move(a));
  }
  out.push_back(other_caller());
  out.push_back(unscreened_untrusted_job());
  out.push_back(screened_code_change());
  // --- read-only mounts ------------------------------------------------------------------------
  out.push_back(probe_attack("write-usr", "toolchains bound read-only", "create files in /usr and /usr/bin", nullptr,
                             "T('create in /usr', lambda: W('/usr/gate-probe'))\n"
                             "T('create in /usr/bin', lambda: W('/usr/bin/gate-probe'))\n",
                             {{"create in /usr", {"EROFS"}}, {"create in /usr/bin", {"EROFS"}}}));
  out.push_back(probe_attack("write-etc", "root (and /etc) remounted read-only", "create files in /etc and a host /etc directory bound into it",
                             nullptr,
                             "T('create in /etc', lambda: W('/etc/gate-probe'))\n"
                             "D = next((d for d in ('/etc/ssl', '/etc/alternatives', '/etc/ld.so.conf.d') if os.path.isdir(d)), '/etc/ssl')\n"
                             "P('bound /etc directory', D)\n"
                             "T('create in the bound /etc directory', lambda: W(D + '/gate-probe'))\n",
                             {{"create in /etc", {"EROFS"}}, {"create in the bound /etc directory", {"EROFS"}}},
                             {"bound /etc directory"}));
  out.push_back(probe_attack("write-root", "root remounted read-only", "create a file in /", nullptr,
                             "T('create in /', lambda: W('/gate-probe'))\n", {{"create in /", {"EROFS"}}}));
  out.push_back(cwd_oracle());
  out.push_back(dotdot());
  out.push_back(symlink_out());
  out.push_back(hardlink());
  out.push_back(write_caches());
  // --- devices, processes, network ----------------------------------------------------------------
  out.push_back(probe_attack("mknod", "no capabilities (CAP_MKNOD); nodev mounts", "create a device node (/dev/mem's 1:1)",
                             nullptr,
                             "import stat\n"
                             "T('mknod in /workspace', lambda: os.mknod('/workspace/gate-mem', stat.S_IFCHR | 0o600, os.makedev(1, 1)))\n"
                             "T('mknod in /tmp', lambda: os.mknod('/tmp/gate-mem', stat.S_IFCHR | 0o600, os.makedev(1, 1)))\n",
                             {{"mknod in /workspace", {"EPERM"}}, {"mknod in /tmp", {"EPERM"}}}));
  out.push_back(host_processes());
  out.push_back(runner_memory());
  out.push_back(host_loopback());
  out.push_back(probe_attack("net-outbound", "own network namespace (loopback only)",
                             "connect to 192.0.2.1:80 and [2001:db8::1]:80, send UDP to 192.0.2.1:53", nullptr,
                             R"PY(def tcp(host, port, fam):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
    finally:
        s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b'x', ('192.0.2.1', 53))
    finally:
        s.close()
T('tcp 192.0.2.1:80', lambda: tcp('192.0.2.1', 80, socket.AF_INET))
T('tcp [2001:db8::1]:80', lambda: tcp('2001:db8::1', 80, socket.AF_INET6))
T('udp 192.0.2.1:53', udp)
)PY",
                             {{"tcp 192.0.2.1:80", {"ENETUNREACH"}},
                              {"tcp [2001:db8::1]:80", {"ENETUNREACH", "EADDRNOTAVAIL", "EAFNOSUPPORT"}},
                              {"udp 192.0.2.1:53", {"ENETUNREACH"}}}));
  out.push_back(dns());
  // --- outbound network (issue 9) -------------------------------------------------------------------
  out.push_back(outbound_connect_attack(
      "net-outbound-ranges", "outbound job: egress ruleset drops every blocked range",
      "connect from an outbound job to one address in each private, shared, link-local (metadata), documentation "
      "and benchmarking range",
      "blocked_drops", Listen::kBehindUplink, [](const AttackEnv&) {
        return std::vector<std::string>{"10.0.0.1",  "100.64.0.1",  "169.254.169.254", "172.16.0.1", "192.0.0.1",
                                        "192.0.2.1", "192.168.0.1", "198.18.0.1",      "198.51.100.1", "203.0.113.1"};
      }));
  out.push_back(outbound_connect_attack(
      "net-outbound-host", "outbound job: egress ruleset drops the host's addresses and gateway",
      "connect from an outbound job to every address of the host (the uplink namespace) and its gateway", "host_drops",
      Listen::kOnUplink, uplink_host_targets));
  out.push_back(outbound_ipv6());
  out.push_back(outbound_dns_private());
  // --- privileges -----------------------------------------------------------------------------
  out.push_back(probe_attack("capabilities", "every capability set emptied", "read the job's capability sets", nullptr,
                             R"PY(for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'):
        P(k, v.strip())
)PY",
                             {{"CapInh", {"0000000000000000"}},
                              {"CapPrm", {"0000000000000000"}},
                              {"CapEff", {"0000000000000000"}},
                              {"CapBnd", {"0000000000000000"}},
                              {"CapAmb", {"0000000000000000"}}}));
  out.push_back(probe_attack("no-new-privs", "no_new_privs", "read NoNewPrivs", nullptr,
                             R"PY(for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k == 'NoNewPrivs':
        P(k, v.strip())
)PY",
                             {{"NoNewPrivs", {"1"}}}));
  out.push_back(setuid_binary());
  // --- seccomp --------------------------------------------------------------------------------
  out.push_back(probe_attack("seccomp-mode", "seccomp filter loaded", "read the job's Seccomp mode", nullptr,
                             R"PY(for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k == 'Seccomp':
        P(k, v.strip())
)PY",
                             {{"Seccomp", {"2"}}}));
  {
    Attack a = probe_attack("seccomp-calls", "seccomp filter (the reviewed table)",
                            "call unshare, mount, keyctl, bpf, ptrace and the rest of the table with harmless arguments",
                            nullptr, std::string(kSeccompTries), seccomp_expects());
    a.needs = "x86_64 syscall numbers";
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  {
    Attack a = probe_attack("ptrace-init", "seccomp: ptrace and process_vm_* refused", "ptrace the job's own init (PID 1)",
                            nullptr,
                            // An attach that works stops PID 1: wait for the stop and detach, or the
                            // job would hang until its timeout.
                            "def attach():\n"
                            "    SC(101, 16, 1, 0, 0)\n"
                            "    os.waitpid(1, 0x40000000)\n"
                            "    SC(101, 17, 1, 0, 0)\n"
                            "T('PTRACE_ATTACH 1', attach)\n"
                            "T('PTRACE_SEIZE 1', lambda: SC(101, 0x4206, 1, 0, 0))\n"
                            "T('process_vm_readv 1', lambda: SC(310, 1, 0, 0, 0, 0, 0))\n",
                            {{"PTRACE_ATTACH 1", {"EPERM"}}, {"PTRACE_SEIZE 1", {"EPERM"}}, {"process_vm_readv 1", {"EPERM"}}});
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  {
    Attack a = probe_attack("keyring", "seccomp: keyring calls refused", "use the kernel keyring", nullptr,
                            "T('keyctl get session keyring', lambda: SC(250, 0, -3, 1))\n"
                            "T('add_key user', lambda: SC(248, b'user', b'gate-key', b'x', 1, -2))\n"
                            "T('request_key user', lambda: SC(249, b'user', b'gate-key', 0, 0))\n",
                            {{"keyctl get session keyring", {"EPERM"}}, {"add_key user", {"EPERM"}}, {"request_key user", {"EPERM"}}});
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  {
    Attack a = probe_attack("user-namespace", "seccomp: unshare/clone with namespace flags refused",
                            "create a new user namespace", nullptr,
                            "C('unshare(CLONE_NEWUSER)', lambda: SC(272, 0x10000000))\n"
                            "RUN('unshare --user --map-root-user', ['unshare', '--user', '--map-root-user', '/bin/true'])\n",
                            {{"unshare(CLONE_NEWUSER)", {"EPERM"}}, {"unshare --user --map-root-user", {"failed*"}}});
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  {
    Attack a = probe_attack("mount", "seccomp: mount calls refused; no CAP_SYS_ADMIN", "mount a tmpfs", nullptr,
                            "T('mount tmpfs on /tmp', lambda: SC(165, b'none', b'/tmp', b'tmpfs', 0, 0))\n"
                            "T('mount(NULL, NULL)', lambda: SC(165, 0, 0, 0, 0, 0))\n"
                            "T('fsopen tmpfs', lambda: SC(430, b'tmpfs', 0))\n"
                            "RUN('mount(8)', ['mount', '-t', 'tmpfs', 'none', '/tmp'])\n",
                            {{"mount tmpfs on /tmp", {"EPERM"}},
                             {"mount(NULL, NULL)", {"EPERM"}},
                             {"fsopen tmpfs", {"EPERM"}},
                             {"mount(8)", {"failed*"}}});
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  out.push_back(tiocsti());
  {
    Attack a = probe_attack("vsock", "seccomp: AF_VSOCK sockets refused",
                            "create an AF_VSOCK socket (the host's vsock port space, outside the network namespace)",
                            nullptr, "T('socket(AF_VSOCK, SOCK_STREAM)', lambda: SC(41, 40, 1, 0))\n",
                            {{"socket(AF_VSOCK, SOCK_STREAM)", {"EPERM"}}});
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  {
    Attack a = probe_attack("uevent-netlink", "seccomp: NETLINK_KOBJECT_UEVENT sockets refused",
                            "open a netlink socket for the kernel's device events (host pids of processes starting VMs)",
                            nullptr,
                            "T('socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)', lambda: SC(41, 16, 2, 15))\n"
                            "T('socket(AF_NETLINK, NETLINK_ROUTE) (allowed)', lambda: SC(41, 16, 2, 0))\n",
                            {{"socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)", {"EPERM"}},
                             {"socket(AF_NETLINK, NETLINK_ROUTE) (allowed)", {"OK"}}});
    a.skip = need_x86_64;
    out.push_back(std::move(a));
  }
  // motor-init is not dumpable: /proc/1/mem, environ and exe are closed to the job, which runs as
  // the same account (ptrace is refused by seccomp, /proc/PID/mem is not).
  out.push_back(probe_attack("init-memory", "motor-init non-dumpable (PR_SET_DUMPABLE 0)",
                             "open motor-init's memory for writing through /proc/1/mem", nullptr,
                             "T('open /proc/1/mem for writing', lambda: os.close(os.open('/proc/1/mem', os.O_RDWR)))\n"
                             "T('read /proc/1/environ', lambda: R('/proc/1/environ'))\n"
                             "T('readlink /proc/1/exe', lambda: os.readlink('/proc/1/exe'))\n",
                             {{"open /proc/1/mem for writing", {"EACCES"}},
                              {"read /proc/1/environ", {"EACCES"}},
                              {"readlink /proc/1/exe", {"EACCES"}}}));
  out.push_back(probe_attack("pty-exhaust", "the job's devpts instance has max=",
                             "open ptys until the kernel refuses (all instances share kernel.pty.max)",
                             [](const AttackEnv&) { return fmt::format("LIMIT = {}\n", kGatePtyTries); },
                             R"PY(fds = []
err = 'none'
for i in range(LIMIT):
    try:
        fds.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        err = _en(e)
        break
P('ptys opened', len(fds))
P('the next ptmx open', err if err != 'none' else 'OK (all %d opened)' % LIMIT)
)PY",
                             {{"the next ptmx open", {"ENOSPC"}}}, {"ptys opened"}));
  out.push_back(probe_attack("proc-leaks", "host facts in procfs masked (empty read-only files)",
                             "read the host's boot command line, boot id, key-users and kernel config", nullptr,
                             R"PY(for p in ('/proc/cmdline', '/proc/sys/kernel/random/boot_id', '/proc/key-users', '/proc/config.gz'):
    T('read ' + p, lambda p=p: R(p))
)PY",
                             {{"read /proc/cmdline", {"OK (read 0 bytes)"}},
                              {"read /proc/sys/kernel/random/boot_id", {"OK (read 0 bytes)"}},
                              {"read /proc/key-users", {"OK (read 0 bytes)"}},
                              {"read /proc/config.gz", {"OK (read 0 bytes)", "ENOENT"}}}));
  out.push_back(mount_view());
  // --- the kernel's knobs -------------------------------------------------------------------------
  out.push_back(hostname());
  out.push_back(sysv_ipc());
  out.push_back(probe_attack("write-proc-sys", "no root in the job (procfs permissions); no capabilities",
                             "open /proc/sys files and /proc/sysrq-trigger for writing", nullptr,
                             R"PY(for p in ('/proc/sys/kernel/hostname', '/proc/sys/kernel/core_pattern', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger'):
    T('open for writing ' + p, lambda p=p: OW(p))
)PY",
                             {{"open for writing /proc/sys/kernel/hostname", {"EACCES", "EROFS", "EPERM"}},
                              {"open for writing /proc/sys/kernel/core_pattern", {"EACCES", "EROFS", "EPERM"}},
                              {"open for writing /proc/sys/vm/drop_caches", {"EACCES", "EROFS", "EPERM"}},
                              {"open for writing /proc/sysrq-trigger", {"EACCES", "EROFS", "EPERM", "ENOENT"}}}));
  out.push_back(probe_attack("write-sys", "no /sys in the job", "open /sys files for writing", nullptr,
                             R"PY(for p in ('/sys/kernel/mm/ksm/run', '/sys/kernel/uevent_helper', '/sys/power/state'):
    T('open for writing ' + p, lambda p=p: OW(p))
)PY",
                             {{"open for writing /sys/kernel/mm/ksm/run", {"ENOENT", "EROFS"}},
                              {"open for writing /sys/kernel/uevent_helper", {"ENOENT", "EROFS"}},
                              {"open for writing /sys/power/state", {"ENOENT", "EROFS"}}}));
  out.push_back(cgroup_files());
  // --- limits and lifetime ----------------------------------------------------------------------
  out.push_back(env_canaries());
  out.push_back(ssh_auth_sock());
  out.push_back(memory_balloon());
  out.push_back(socket_buffers());
  out.push_back(scan_fifo());
  out.push_back(scan_memory());
  out.push_back(fork_bomb());
  out.push_back(cpuset());
  out.push_back(daemon());
  out.push_back(timeout_loop());
  return out;
}

}  // namespace motor::gate
