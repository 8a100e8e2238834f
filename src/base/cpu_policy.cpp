#include "base/cpu_policy.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "motor/sys_error.hpp"

namespace motor {
namespace {

// <linux/sched/types.h>'s struct sched_attr (glibc 2.36 has no sched_setattr wrapper).
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime, sched_deadline, sched_period;
  uint32_t sched_util_min, sched_util_max;
};
constexpr uint64_t kResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK

bool is_fair(int policy) { return policy == SCHED_OTHER || policy == SCHED_BATCH || policy == SCHED_IDLE; }

// The calling thread gets a fair `policy`, its nice kept, with or without the reset-on-fork flag.
// sched_setattr, not sched_setscheduler with SCHED_RESET_ON_FORK in the policy: systemd's
// RestrictRealtime= (the runner's unit) refuses every sched_setscheduler policy above SCHED_IDLE,
// and that flag is one.
Status set_fair_policy(int policy, bool reset_on_fork) {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  if (nice == -1 && errno != 0) return sys_error("getpriority");
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = static_cast<uint32_t>(policy);
  attr.sched_flags = reset_on_fork ? kResetOnFork : 0;
  attr.sched_nice = nice;
  if (syscall(SYS_sched_setattr, 0, &attr, 0u) != 0) return sys_error("sched_setattr");
  return {};
}

}  // namespace

Status make_this_thread_batch() {
  const int now = sched_getscheduler(0);
  if (now < 0) return sys_error("sched_getscheduler");
  return set_fair_policy(SCHED_BATCH, (now & SCHED_RESET_ON_FORK) != 0);
}

Status reset_nice_on_fork() {
  const int now = sched_getscheduler(0);
  if (now < 0) return sys_error("sched_getscheduler");
  if (!is_fair(now & ~SCHED_RESET_ON_FORK)) return make_error("internal", "the runner runs under a real-time policy");
  return set_fair_policy(now & ~SCHED_RESET_ON_FORK, true);
}

Status with_this_thread_batch(const std::function<Status()>& while_batch) {
  sched_param before_param{};
  const int before = sched_getscheduler(0);
  if (before < 0 || sched_getparam(0, &before_param) != 0) return sys_error("reading this thread's policy");
  if (auto s = make_this_thread_batch(); !s) return s;
  Status result = while_batch();
  const int policy = before & ~SCHED_RESET_ON_FORK;
  Status restored = is_fair(policy) ? set_fair_policy(policy, (before & SCHED_RESET_ON_FORK) != 0)
                                    : (sched_setscheduler(0, before, &before_param) == 0 ? Status{} : Status(sys_error("sched_setscheduler")));
  if (!restored && result) return make_error(restored.error().code, "restoring this thread's policy: " + restored.error().message);
  return result;
}

}  // namespace motor
