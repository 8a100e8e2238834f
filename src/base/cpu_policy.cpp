#include "base/cpu_policy.hpp"

#include <sched.h>

#include "motor/sys_error.hpp"

namespace motor {

Status make_this_thread_batch() {
  // sched_setscheduler keeps the thread's nice value for the fair policies (priority must be 0).
  const sched_param param{};
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) return sys_error("sched_setscheduler SCHED_BATCH");
  return {};
}

Status with_this_thread_batch(const std::function<Status()>& while_batch) {
  sched_param before_param{};
  const int before = sched_getscheduler(0);
  if (before < 0 || sched_getparam(0, &before_param) != 0) return sys_error("reading this thread's policy");
  if (auto s = make_this_thread_batch(); !s) return s;
  Status result = while_batch();
  if (sched_setscheduler(0, before, &before_param) != 0 && result) return sys_error("restoring this thread's policy");
  return result;
}

}  // namespace motor
