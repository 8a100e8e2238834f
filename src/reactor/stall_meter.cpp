#include "reactor/stall_meter.hpp"

#include <time.h>

namespace motor::reactor {
namespace {

// The loop thread's CPU time (user and system), or 0 if the clock cannot be read.
uint64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

StallMeter::StallMeter(uv_loop_t* loop) : loop_(loop) {
  uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
  // Without its prepare handle the meter reads 0: a measurement lost, never a job (the stall
  // figure is for the operator's status and the benchmarks).
  if (prepare_.init(this, uv_prepare_init, loop) != 0) return;
  const int rc = uv_prepare_start(prepare_.get(), [](uv_prepare_t* h) {
    if (auto* self = owner_of<StallMeter>(h)) self->on_prepare();
  });
  if (rc != 0) {
    prepare_.close();
    return;
  }
  uv_unref(prepare_.handle());  // never keeps the loop alive on its own
}

void StallMeter::on_prepare() {
  const uint64_t now = uv_hrtime();
  const uint64_t idle = uv_metrics_idle_time(loop_);
  const uint64_t cpu = thread_cpu_ns();
  if (last_ns_ != 0) {
    const uint64_t wall = now - last_ns_;
    const uint64_t waited = idle - last_idle_ns_;
    const uint64_t busy = wall > waited ? wall - waited : 0;
    if (busy > worst_ns_) worst_ns_ = busy;
    // Waiting in epoll costs next to no CPU: the difference is the iteration's own work.
    const uint64_t used = cpu > last_cpu_ns_ ? cpu - last_cpu_ns_ : 0;
    if (used > worst_cpu_ns_) worst_cpu_ns_ = used;
  }
  last_ns_ = now;
  last_idle_ns_ = idle;
  last_cpu_ns_ = cpu;
}

}  // namespace motor::reactor
