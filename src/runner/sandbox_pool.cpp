#include "runner/sandbox_pool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "base/log.hpp"
#include "motor/test_switches.hpp"
#include "motor/sys_error.hpp"

namespace motor::runner {
namespace {

// The cgroup waiting sandboxes live in: this runner's own (recovery removes a dead runner's).
std::string pool_cgroup_name() { return fmt::format("sandbox-pool-{}", getpid()); }

// Builds that fail one after another before the pool stops trying.
constexpr int kMaxFailuresInARow = 3;

}  // namespace

SandboxPool::SandboxPool(uv_loop_t* loop, sandbox::CgroupDriver& cgroups, sandbox::JobStarter& starter)
    : loop_(loop), cgroups_(cgroups), starter_(starter) {}

SandboxPool::~SandboxPool() { clear(); }

Status SandboxPool::configure(Settings settings) {
  clear();
  settings_ = std::move(settings);
  stopped_ = false;
  failures_in_a_row_ = 0;
  proof_ = Proof::kNone;
  if (settings_.size == 0) return {};
  // Test build only: a job that stays uid 0 without capabilities cannot enter its workspace after
  // its capabilities went (a sandbox built for the job enters it before): it builds its own.
  if (control_weakened("job-account")) return {};
  if (!starter_.running()) {
    stop("the job starter's helper is not running");
    return {};
  }
  sandbox::CgroupLimits limits;
  limits.pids_max = static_cast<int64_t>(4 * settings_.size + 16);  // motor-init alone in each
  limits.memory_bytes = static_cast<int64_t>(settings_.size) * (int64_t{64} << 20);
  auto cg = cgroups_.create(pool_cgroup_name(), limits);
  if (!cg) return make_error(cg.error().code, "the sandbox pool's cgroup: " + cg.error().message);
  cgroup_ = std::move(*cg);
  refill();
  return {};
}

void SandboxPool::clear() {
  entries_.clear();  // each waiting motor-init is killed, and reaped on the loop
  cgroup_.reset();   // removed once empty (through the reaper while the kills land)
  *alive_ = 0;
  alive_ = std::make_shared<char>();
}

void SandboxPool::stop(const std::string& why) {
  if (stopped_) return;
  stopped_ = true;
  if (settings_.size > 0) log_warning("no sandboxes are built ahead of jobs any more: {}; each job builds its own", why);
  entries_.clear();
}

size_t SandboxPool::ready() const {
  // None is ready for a job before the proof: take() hands out nothing until then.
  if (stopped_ || proof_ != Proof::kProven) return 0;
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += e.ready ? 1 : 0;
  return n;
}

void SandboxPool::refill() {
  while (!stopped_ && cgroup_ && entries_.size() < settings_.size && starter_.running()) build_one();
}

void SandboxPool::build_one() {
  const uint64_t id = ++next_id_;
  int out_pipe[2], err_pipe[2], gate_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return stop(sys_error("pipe2").message);
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return stop(sys_error("pipe2").message);
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  if (pipe2(gate_pipe, O_CLOEXEC) != 0) return stop(sys_error("pipe2").message);
  UniqueFd gate_read(gate_pipe[0]), gate_write(gate_pipe[1]);
  const int capacity = fcntl(gate_write.get(), F_GETPIPE_SZ);
  if (capacity <= 0 || fcntl(gate_write.get(), F_SETFL, O_NONBLOCK) != 0) return stop(sys_error("the gate's pipe").message);

  Entry& entry = entries_[id];
  entry.out_read = std::move(out_read);
  entry.err_read = std::move(err_read);
  entry.gate = std::move(gate_write);
  entry.gate_capacity = static_cast<size_t>(capacity);

  sandbox::SpawnSpec spec = settings_.spec;
  spec.stdin_fd = gate_read.get();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = err_write.get();
  spec.cgroup = cgroup_.get();
  sandbox::SandboxedChild::Events events;
  events.start_failed = [this, id](const Error& e) { on_gone(id, "it could not be built: " + e.message); };
  events.execd = [this, id] { on_ready(id); };
  events.exited = [this, id](sandbox::SandboxedExit) { on_gone(id, "its motor-init exited while it waited"); };
  auto child = sandbox::SandboxedChild::start(loop_, starter_, settings_.box, spec, {}, std::move(events));
  // A starter that failed to send answers at once: the entry may be gone already.
  if (auto it = entries_.find(id); it != entries_.end()) it->second.child = std::move(child);
}

void SandboxPool::on_ready(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.ready = true;
  failures_in_a_row_ = 0;
  if (proof_ == Proof::kNone) prove(id);
}

// One late bind with nothing to mount: the helper enters the sandbox's mount namespace and comes
// back, as it will for every job.
void SandboxPool::prove(uint64_t id) {
  proof_ = Proof::kAsked;
  std::weak_ptr<char> alive = alive_;
  const auto& child = entries_.at(id).child;
  starter_.adopt_sandbox(child->pid(), child->mount_ns(), nullptr, nullptr, {}, [this, alive](Status s) {
    if (alive.expired()) return;
    if (!s) {
      proof_ = Proof::kNone;
      return stop("the job starter cannot enter a waiting sandbox (" + s.error().message + ")");
    }
    proof_ = Proof::kProven;
    log_info("jobs start in sandboxes built ahead ({} kept ready)", settings_.size);
  });
}

void SandboxPool::on_gone(uint64_t id, const std::string& why) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const bool was_ready = it->second.ready;
  entries_.erase(it);  // from the child's own start_failed or exited event, which may destroy it
  if (stopped_) return;
  log_warning("a sandbox built ahead of its job is gone: {}", why);
  if (!was_ready && ++failures_in_a_row_ >= kMaxFailuresInARow) {
    return stop(fmt::format("{} sandboxes in a row could not be built", failures_in_a_row_));
  }
}

std::unique_ptr<PooledSandbox> SandboxPool::take(const sandbox::SandboxConfig& box, const JobCommand& command) {
  if (stopped_ || proof_ != Proof::kProven || !starter_.running()) return nullptr;
  // A ready one, else one still being built: the starter answers in order, so it is ready
  // sooner than a sandbox the job asked for now would be.
  auto it = entries_.begin();
  while (it != entries_.end() && !it->second.ready) ++it;
  if (it == entries_.end()) it = entries_.begin();
  if (it == entries_.end() || !it->second.child || command.executable != settings_.spec.executable ||
      !command.account || command.account->uid != settings_.spec.uid) {
    return nullptr;
  }
  // The message's fields end in NUL: a string holding one would be cut (the spawn refuses it).
  auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  if (has_nul(command.cwd) || std::any_of(command.argv.begin(), command.argv.end(), has_nul) ||
      std::any_of(command.env.begin(), command.env.end(), has_nul)) {
    return nullptr;
  }
  std::string message = sandbox::init_command_message(command.argv, command.env, command.cwd);
  if (message.size() > it->second.gate_capacity) return nullptr;
  auto binds = sandbox::late_binds(settings_.box, box);
  if (!binds) return nullptr;
  auto pooled = std::make_unique<PooledSandbox>();
  pooled->command_message = std::move(message);
  pooled->child = std::move(it->second.child);
  pooled->out_read = std::move(it->second.out_read);
  pooled->err_read = std::move(it->second.err_read);
  pooled->gate = std::move(it->second.gate);
  pooled->binds = std::move(*binds);
  entries_.erase(it);
  ++taken_;
  return pooled;
}

}  // namespace motor::runner
