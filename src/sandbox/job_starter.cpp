#include "sandbox/job_starter.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "motor/fd_io.hpp"
#include "motor/sys_error.hpp"
#include "base/helper_process.hpp"
#include "base/log.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "sandbox/netns_pool.hpp"
#include "sandbox/sandbox_codec.hpp"
#include "reactor/iteration_budget.hpp"
#include "reactor/slow_call.hpp"

namespace motor::sandbox {
namespace {

// A job needs at most stdin, stdout, stderr, one cgroup2 directory and a few v1 cgroup.procs.
constexpr size_t kMaxFds = 16;
// How long the helper waits for a job's exec before it goes on anyway.
constexpr int kExecWaitMs = 5000;
// A request the helper does not take within this time fails (the helper is stuck).
constexpr time_t kSendTimeoutS = 2;

// A request's word: what the helper is asked to do.
constexpr uint32_t kSpawnRequest = 0;       // body: the sandbox and the spec; fds: see helper_main
// body: the pid, the cgroup's fd counts, late_binds.hpp's binds; fds: the sandbox's mount
// namespace, then the cgroup's attach fds and its clone-into fd
constexpr uint32_t kAdoptRequest = 1;

// ---- a cgroup passed as fds: its attach fds, then its clone-into fd; their counts in the body ----

struct CgroupFds {
  uint64_t attach = 0;
  bool clone_into = false;
  size_t count() const { return attach + (clone_into ? 1 : 0); }
};

// Appends `cgroup`'s fds to a request's (none for no cgroup).
CgroupFds append_cgroup_fds(const JobCgroup* cgroup, std::vector<int>& fds) {
  if (!cgroup) return {};
  const auto& attach = cgroup->child_attach_fds();
  fds.insert(fds.end(), attach.begin(), attach.end());
  const bool clone_into = cgroup->clone_into_fd() >= 0;
  if (clone_into) fds.push_back(cgroup->clone_into_fd());
  return {attach.size(), clone_into};
}

void encode_cgroup_fds(WireWriter& w, CgroupFds c) {
  w.num(c.attach);
  w.num(c.clone_into ? 1 : 0);
}

void decode_cgroup_fds(WireReader& r, CgroupFds& c) {
  c.attach = r.num();
  c.clone_into = r.num() != 0;
}

// A cgroup the helper is to make: its name ("" for none) and limits.
void encode_cgroup_request(WireWriter& w, const CgroupRequest* make) {
  const CgroupRequest none;
  const CgroupRequest& m = make ? *make : none;
  w.str(m.name);
  w.num(static_cast<uint64_t>(m.limits.memory_bytes));
  w.num(static_cast<uint64_t>(m.limits.pids_max));
  w.str(m.limits.cpus);
}

void decode_cgroup_request(WireReader& r, CgroupRequest& m) {
  m.name = r.str();
  m.limits.memory_bytes = static_cast<int64_t>(r.num());
  m.limits.pids_max = static_cast<int64_t>(r.num());
  m.limits.cpus = r.str();
}

// The helper's view of the cgroup whose fds begin at `fds[first]`.
PassedCgroup passed_cgroup(const std::vector<UniqueFd>& fds, size_t first, CgroupFds c) {
  std::vector<int> attach;
  for (size_t i = 0; i < c.attach; ++i) attach.push_back(fds[first + i].get());
  return PassedCgroup(c.clone_into ? fds[first + c.attach].get() : -1, std::move(attach));
}

// ---- the request body: the sandbox and the spec (sandbox/sandbox_codec.hpp), then the fd counts ----

// Then the cgroup the helper is to make (SpawnSpec::make_cgroup): its name, "" for none, and
// its limits.
std::string encode_request(const SandboxConfig& box, const SpawnSpec& spec, CgroupFds cgroup) {
  WireWriter w;
  encode_sandbox_config(w, box);
  encode_spawn_spec(w, spec);
  encode_cgroup_fds(w, cgroup);
  encode_cgroup_request(w, spec.make_cgroup);
  return std::move(w.bytes());
}

struct Request {
  SandboxConfig box;
  SpawnSpec spec;
  CgroupFds cgroup;
  CgroupRequest make_cgroup;  // name "": the cgroup came as fds
};

bool decode_request(const std::string& body, Request& q) {
  WireReader r(body);
  if (!decode_sandbox_config(r, q.box) || !decode_spawn_spec(r, q.spec)) return false;
  decode_cgroup_fds(r, q.cgroup);
  decode_cgroup_request(r, q.make_cgroup);
  return r.ok() && r.at_end();
}

struct AdoptRequest {
  pid_t pid = -1;
  CgroupFds cgroup;
  CgroupRequest make_cgroup;  // name "": the cgroup came as fds, or none
  std::vector<LateBind> binds;
};

std::string encode_adopt(pid_t pid, CgroupFds cgroup, const CgroupRequest* make, const std::vector<LateBind>& binds) {
  WireWriter w;
  w.num(static_cast<uint64_t>(pid));
  encode_cgroup_fds(w, cgroup);
  encode_cgroup_request(w, make);
  w.num(binds.size());
  for (const LateBind& b : binds) {
    w.str(b.source);
    w.str(b.target);
    w.num(b.attr_set);
  }
  return std::move(w.bytes());
}

bool decode_adopt(const std::string& body, AdoptRequest& q) {
  WireReader r(body);
  q.pid = static_cast<pid_t>(r.num());
  decode_cgroup_fds(r, q.cgroup);
  decode_cgroup_request(r, q.make_cgroup);
  const uint64_t count = r.num();
  if (!r.ok() || count > kMaxFds || q.cgroup.attach > kMaxFds) return false;
  q.binds.resize(count);
  for (LateBind& b : q.binds) {
    b.source = r.str();
    b.target = r.str();
    b.attr_set = r.num();
  }
  return r.ok() && r.at_end();
}

// ---- one message: a header {u32 body length, u32 word} carrying the fds, then the body ----

// Header and body go in one sendmsg: sent apart, the header woke the reader, which then blocked
// reading a body its sender had not written yet (the runner's loop waited so for the starter's
// reply, up to 3 ms in a burst of starts, perf sched).
bool send_message(int sock, uint32_t word, const std::string& body, const std::vector<int>& fds) {
  uint32_t header[2] = {static_cast<uint32_t>(body.size()), word};
  iovec iov[2] = {{header, sizeof header}, {const_cast<char*>(body.data()), body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!c) return false;
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  // A stream socket may take part of a large message: the rest follows, in order.
  size_t sent = static_cast<size_t>(n);
  if (sent < sizeof header) {
    if (!write_all(sock, reinterpret_cast<char*>(header) + sent, sizeof header - sent)) return false;
    sent = sizeof header;
  }
  const size_t body_sent = sent - sizeof header;
  return write_all(sock, body.data() + body_sent, body.size() - body_sent);
}

// Receives one message; the fds arrive close-on-exec. False on EOF or a malformed header. With
// `would_block`, returns false and sets it when no message has begun to arrive.
bool receive_message(int sock, uint32_t& word, std::string& body, std::vector<UniqueFd>& fds,
                     bool* would_block = nullptr) {
  uint32_t header[2] = {0, 0};
  iovec iov{header, sizeof header};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (would_block ? MSG_DONTWAIT : 0));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && would_block && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    *would_block = true;
    return false;
  }
  if (n <= 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) return false;
  if (static_cast<size_t>(n) < sizeof header &&
      !read_exact(sock, reinterpret_cast<char*>(header) + n, sizeof header - static_cast<size_t>(n)))
    return false;
  word = header[1];
  body.assign(header[0], '\0');
  return read_exact(sock, body.data(), body.size());
}

// ---- the helper process ----

constexpr uint32_t kReplyOk = 0, kReplyError = 1;

void reply_error(int sock, const std::string& message) { (void)send_message(sock, kReplyError, message, {}); }

// The cgroup a spawn asked for (SpawnSpec::make_cgroup), made with `cgroups`, in the helper or,
// without it, in the runner.
Expected<std::unique_ptr<JobCgroup>> make_requested(CgroupDriver* cgroups, const CgroupRequest& request) {
  if (!cgroups) return make_error("internal", "no cgroup driver to make the job's cgroup with");
  auto made = cgroups->create(request.name, request.limits);
  if (!made) return make_error(made.error().code, "making the job's cgroup: " + made.error().message);
  return made;
}

// In the helper: the cgroup a request asks for (a name), made into `made`; false once the
// failure is answered.
bool make_asked(int sock, CgroupDriver* cgroups, const CgroupRequest& request, std::unique_ptr<JobCgroup>& made) {
  if (request.name.empty()) return true;
  auto created = make_requested(cgroups, request);
  if (!created) {
    reply_error(sock, created.error().message);
    return false;
  }
  made = std::move(*created);
  return true;
}

// The job cgroup the helper made for one spawn. The helper never destroys an owned JobCgroup:
// its destructor would hand a busy one to the runner's reaper, a loop object this process only
// has a copy of. Made and spawned: disowned (the runner opens it by name); made and failed:
// killed and removed here, or left for the runner, which looks for it by name when the spawn fails.
void let_go(std::unique_ptr<JobCgroup>& made, bool spawned) {
  if (!made) return;
  if (spawned) {
    (void)made->disown();
  } else {
    CgroupRemains remains;
    std::string error;
    if (!made->release_here(remains, error)) log_warning("job starter: job cgroup {} left for the runner: {}", made->name(), error);
  }
  made.reset();
}

// Runs in the helper (fork_helper_process has cut it off from the runner's loop).
[[noreturn]] void helper_main(int sock, size_t pool_size, CgroupDriver* cgroups) {
  NetnsPool pool(pool_size);
  bool pooling = pool_size > 0;
  if (pooling) {
    if (auto s = pool.open_home(); !s) {
      log_warning("job starter: no network namespace pool: {}", s.error().message);
      pooling = false;
    }
  }
  for (;;) {
    // Idle: top up the pool, but never keep a waiting request waiting for more than one.
    while (pooling && !pool.full()) {
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) break;
      bool stranded = false;
      if (auto s = pool.add_one(stranded); !s) {
        log_warning("job starter: {}; jobs create their network namespace in clone3", s.error().message);
        if (stranded) _exit(2);  // in a foreign network namespace: the runner spawns in process
        pooling = false;
      }
    }
    uint32_t word = 0;
    std::string body;
    std::vector<UniqueFd> fds;
    if (!receive_message(sock, word, body, fds)) _exit(0);
    const uint64_t received_ns = monotonic_ns();
    if (word == kAdoptRequest) {
      AdoptRequest a;
      if (!decode_adopt(body, a) || fds.size() != 1 + a.cgroup.count() ||
          (!a.make_cgroup.name.empty() && a.cgroup.count() != 0)) {
        reply_error(sock, "job starter: malformed request");
        continue;
      }
      // A cgroup made here is the runner's by its name from the moment it exists, whatever
      // follows (it opens it by name, or finds it when the adoption failed): never removed here.
      std::unique_ptr<JobCgroup> made;
      if (!make_asked(sock, cgroups, a.make_cgroup, made)) continue;
      // Into the job's cgroup first: from then on its limits hold and its kill reaches it.
      PassedCgroup passed = passed_cgroup(fds, 1, a.cgroup);
      auto adopted = made ? made->adopt(a.pid) : passed.adopt(a.pid);
      let_go(made, true);
      if (!adopted) {
        reply_error(sock, adopted.error().message);
        continue;
      }
      const char* stage = "";
      bool stranded = false;
      const int err = mount_late_binds(fds[0].get(), a.binds, stage, stranded);
      if (stranded) _exit(2);  // in a job's mount namespace: the runner spawns in process
      if (err != 0) {
        reply_error(sock, std::string(stage) + ": " + std::strerror(err));
      } else {
        (void)send_message(sock, kReplyOk, {}, {});
      }
      continue;
    }
    Request q;
    // The fds: stdin, stdout, stderr, the cgroup's attach fds, its clone-into fd, the egress namespace.
    // A cgroup comes as fds or is to be made here, never both.
    if (word != kSpawnRequest || !decode_request(body, q) || q.cgroup.attach > kMaxFds ||
        fds.size() != 3 + q.cgroup.count() + (q.box.network ? 1 : 0) ||
        (!q.make_cgroup.name.empty() && q.cgroup.count() != 0)) {
      reply_error(sock, "job starter: malformed request");
      continue;
    }
    PassedCgroup cgroup = passed_cgroup(fds, 3, q.cgroup);
    std::unique_ptr<JobCgroup> made;
    if (!make_asked(sock, cgroups, q.make_cgroup, made)) continue;
    if (q.box.network) use_egress_namespace(*q.box.network, fds[3 + q.cgroup.count()].get());
    q.spec.stdin_fd = fds[0].get();
    q.spec.stdout_fd = fds[1].get();
    q.spec.stderr_fd = fds[2].get();
    q.spec.cgroup = made ? made.get() : &cgroup;
    q.spec.make_cgroup = nullptr;
    q.spec.child_of_callers_parent = true;
    q.spec.share_memory_until_exec = true;
    UniqueFd net = pool.take();
    SandboxedSpawn job;
    auto spawned = job.run(q.box, q.spec, net.get());
    net.reset();  // from here only the job holds its namespace
    fds.clear();
    if (!spawned) {
      let_go(made, false);
      reply_error(sock, spawned.error().message);
      continue;
    }
    // Until the child execs it shares this process's pages copy-on-write: touch as little
    // memory as possible until then (no frees, no pool refill), so neither side copies pages.
    UniqueFd exec_seen(fcntl(spawned->setup_status.get(), F_DUPFD_CLOEXEC, 0));
    const SpawnTimes& t = spawned->times;
    std::string answer = std::to_string(spawned->pid);
    for (uint64_t at : {received_ns, t.planned_ns, t.cloned_ns, t.child.started, t.child.mounted, t.child.confined,
                        t.child.ready})
      answer += " " + std::to_string(at);
    std::vector<int> answer_fds = {spawned->pidfd.get(), spawned->setup_status.get()};
    if (spawned->mount_ns) answer_fds.push_back(spawned->mount_ns.get());
    (void)send_message(sock, kReplyOk, answer, answer_fds);
    if (exec_seen) {
      pollfd p{exec_seen.get(), 0, 0};  // POLLHUP: the child's end closed at exec (or exit)
      while (poll(&p, 1, kExecWaitMs) < 0 && errno == EINTR) {
      }
    }
    let_go(made, true);  // after the exec: a CLONE_VM child shares these pages until then
  }
}

}  // namespace

JobStarter::~JobStarter() { stop(); }

Status JobStarter::start(uv_loop_t* loop, size_t netns_pool_size, CgroupDriver* cgroups) {
  cgroups_ = cgroups;
  auto helper = fork_helper_process("motor-starter",
                                    [netns_pool_size, cgroups](int fd) { helper_main(fd, netns_pool_size, cgroups); });
  if (!helper) return helper.error();
  pid_ = helper->pid;
  sock_ = std::move(helper->channel);
  // A helper stuck on a request must not stall the loop on the next one for long.
  timeval limit{kSendTimeoutS, 0};
  setsockopt(sock_.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  int rc = poll_.init(this, uv_poll_init, loop, sock_.get());
  if (rc == 0) {
    // uv_poll_init made the socket non-blocking; the rest of a message that has begun to arrive
    // is read (and a request written) blocking, which the send timeout bounds.
    fcntl(sock_.get(), F_SETFL, fcntl(sock_.get(), F_GETFL) & ~O_NONBLOCK);
    rc = uv_poll_start(poll_.get(), UV_READABLE | UV_DISCONNECT, [](uv_poll_t* h, int, int) {
      if (auto* self = reactor::owner_of<JobStarter>(h)) self->on_reply();
    });
  }
  if (auto s = reactor::uv_status(rc, "watching the job starter's socket"); !s) {
    stop();  // the runner spawns in process
    return s;
  }
  uv_unref(poll_.handle());  // never keeps the loop alive by itself
  return {};
}

namespace {

// "PID RECEIVED PLANNED CLONED STARTED MOUNTED CONFINED READY" (SpawnTimes, ns), the pidfd, the
// setup-status pipe and, for a sandbox built ahead, its mount namespace.
Expected<SpawnedProcess> spawn_answer(uint32_t word, const std::string& body, std::vector<UniqueFd>& got) {
  if (word != kReplyOk) return make_error("io", body);
  SpawnedProcess out;
  char* at = nullptr;
  out.pid = static_cast<pid_t>(std::strtol(body.c_str(), &at, 10));
  SpawnTimes& t = out.times;
  for (uint64_t* field : {&t.received_ns, &t.planned_ns, &t.cloned_ns, &t.child.started, &t.child.mounted,
                          &t.child.confined, &t.child.ready})
    *field = std::strtoull(at, &at, 10);
  if (got.size() < 2 || got.size() > 3 || out.pid <= 0) {
    return make_error("io", "the job starter answered without a pid and pidfd");
  }
  out.pidfd = std::move(got[0]);
  out.setup_status = std::move(got[1]);
  if (got.size() == 3) out.mount_ns = std::move(got[2]);
  return out;
}

}  // namespace

void JobStarter::spawn(const SandboxConfig& box, const SpawnSpec& spec, Done done) {
  if (running()) {
    if (auto sent = send_request(box, spec); sent) {
      waiting_.push_back([this, done = std::move(done)](uint32_t word, std::string body, std::vector<UniqueFd> fds) {
        auto spawned = spawn_answer(word, body, fds);
        const bool garbled = word == kReplyOk && !spawned;
        done(std::move(spawned));
        if (garbled) fail_all("the job starter answered without a pid and pidfd");
      });
      return;
    } else {
      log_error("the job starter failed ({}); jobs are now started by the runner itself", sent.error().message);
    }
  }
  // In process: a cgroup asked for is made here, on the loop, as the runner did before its helper.
  SpawnSpec here = spec;
  std::unique_ptr<JobCgroup> made;
  if (spec.make_cgroup) {
    auto created = make_requested(cgroups_, *spec.make_cgroup);
    if (!created) return done(created.error());
    made = std::move(*created);
    here.cgroup = made.get();
    here.make_cgroup = nullptr;
  }
  SandboxedSpawn job;
  auto spawned = job.run(box, here);
  if (made && spawned) (void)made->disown();  // the caller opens it by name; a failed spawn's goes now
  done(std::move(spawned));
}

void JobStarter::adopt_sandbox(pid_t pid, int mount_ns, const JobCgroup* cgroup, const CgroupRequest* make_cgroup,
                               const std::vector<LateBind>& binds, std::function<void(Status)> done) {
  if (!running()) return done(make_error("io", "the job starter is not running"));
  if (mount_ns < 0) return done(make_error("io", "the sandbox sent no mount namespace"));
  if (cgroup && make_cgroup) return done(make_error("internal", "a sandbox is adopted into one cgroup"));
  if (make_cgroup && !cgroups_) return done(make_error("internal", "no cgroup driver to make the job's cgroup with"));
  std::vector<int> fds = {mount_ns};
  const CgroupFds passed = append_cgroup_fds(cgroup, fds);
  if (fds.size() > kMaxFds) return done(make_error("internal", "too many fds for the job starter"));
  if (!send_message(sock_.get(), kAdoptRequest, encode_adopt(pid, passed, make_cgroup, binds), fds)) {
    const std::string why = std::strerror(errno);
    fail_all("the job starter is gone: " + why);
    return done(make_error("io", "the job starter is gone: " + why));
  }
  waiting_.push_back([done = std::move(done)](uint32_t word, std::string body, std::vector<UniqueFd>) {
    done(word == kReplyOk ? Status{} : Status(make_error("io", body)));
  });
}

Status JobStarter::send_request(const SandboxConfig& box, const SpawnSpec& spec) {
  if (!spec.cgroup && !spec.make_cgroup) return make_error("internal", "spawn needs the job's cgroup");
  std::vector<int> fds = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
  const CgroupFds passed = append_cgroup_fds(spec.cgroup, fds);
  if (box.network) fds.push_back(box.network->egress_netns_fd);  // the helper does not hold it
  if (fds.size() > kMaxFds) return make_error("internal", "too many fds for the job starter");
  if (!send_message(sock_.get(), kSpawnRequest, encode_request(box, spec, passed), fds)) {
    const std::string why = std::strerror(errno);
    fail_all("the job starter is gone: " + why);
    return make_error("io", "the job starter is gone: " + why);
  }
  return {};
}

void JobStarter::on_reply() {
  // Past the iteration's budget the answer (and the job's spawn it completes) waits for a later
  // iteration: the socket stays readable.
  if (reactor::IterationBudget::defer()) return;
  uint32_t word = 0;
  std::string body;
  std::vector<UniqueFd> got;
  bool would_block = false;
  if (!receive_message(sock_.get(), word, body, got, &would_block)) {
    if (would_block) return;  // a wake-up without a message
    return fail_all("the job starter closed its socket");
  }
  if (waiting_.empty()) return fail_all("the job starter answered a request it was not sent");
  reactor::SlowCall timed("the job starter's answer", reactor::SlowCall::kTraceOnly);
  Answer answer = std::move(waiting_.front());
  waiting_.pop_front();
  answer(word, std::move(body), std::move(got));
}

void JobStarter::fail_all(const std::string& why) {
  log_error("{}; jobs are now started by the runner itself", why);
  auto waiting = std::move(waiting_);
  waiting_.clear();
  stop();
  for (auto& answer : waiting) answer(kReplyError, why, {});
}

void JobStarter::stop() {
  poll_.close();
  if (pid_ <= 0) return;
  sock_.reset();  // the helper reads EOF and exits
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace motor::sandbox
