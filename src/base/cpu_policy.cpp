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

}  // namespace motor
