#include "reactor/stall_meter.hpp"

namespace motor::reactor {

StallMeter::StallMeter(uv_loop_t* loop) : loop_(loop) {
  uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
  // Without its prepare handle the meter reads 0: a measurement lost, never a job (the stall
  // figure is for the operator's status and the benchmarks).
  if (prepare_.init(this, uv_prepare_init, loop) != 0) return;
  const int rc = uv_prepare_start(prepare_.get(), [](uv_prepare_t* h) {
    auto* self = owner_of<StallMeter>(h);
    if (!self) return;
    const uint64_t now = uv_hrtime();
    const uint64_t idle = uv_metrics_idle_time(self->loop_);
    if (self->last_ns_ != 0) {
      const uint64_t wall = now - self->last_ns_;
      const uint64_t waited = idle - self->last_idle_ns_;
      const uint64_t busy = wall > waited ? wall - waited : 0;
      if (busy > self->worst_ns_) self->worst_ns_ = busy;
    }
    self->last_ns_ = now;
    self->last_idle_ns_ = idle;
  });
  if (rc != 0) {
    prepare_.close();
    return;
  }
  uv_unref(prepare_.handle());  // never keeps the loop alive on its own
}

}  // namespace motor::reactor
