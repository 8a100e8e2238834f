#include "reactor/stall_meter.hpp"

#include <fmt/format.h>

#include "reactor/slow_call.hpp"

namespace motor::reactor {

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

void StallMeter::trace_from(uint64_t threshold_us, TraceReporter reporter) {
  trace_ns_ = threshold_us * 1000;
  trace_reporter_ = reporter;
  SlowCall::set_tracing(threshold_us != 0 && reporter != nullptr);
  if (!reporter) trace_ns_ = 0;
}

void StallMeter::report_trace(uint64_t busy_ns, uint64_t cpu_ns, uint64_t began_ns,
                              const std::vector<SlowCall::Noted>& noted) const {
  std::string calls;
  for (const auto& n : noted) {
    const uint64_t at = n.start_ns > began_ns ? n.start_ns - began_ns : 0;
    calls += fmt::format("{}{}{} {}+{} (CPU {})", calls.empty() ? "" : "; ", std::string(static_cast<size_t>(n.depth), '>'),
                         n.what, at / 1000, n.ns / 1000, n.cpu_ns / 1000);
  }
  trace_reporter_(busy_ns / 1000, cpu_ns / 1000, calls.empty() ? std::string("no measured call") : calls);
}

uint64_t StallMeter::busy_now_ns() const {
  if (last_ns_ == 0) return 0;
  const uint64_t wall = uv_hrtime() - last_ns_;
  const uint64_t waited = uv_metrics_idle_time(loop_) - last_idle_ns_;
  return wall > waited ? wall - waited : 0;
}

void StallMeter::on_prepare() {
  ++iterations_;
  const uint64_t now = uv_hrtime();
  const uint64_t idle = uv_metrics_idle_time(loop_);
  const uint64_t cpu = SlowCall::thread_cpu_ns();
  if (last_ns_ != 0) {
    const uint64_t wall = now - last_ns_;
    const uint64_t waited = idle - last_idle_ns_;
    const uint64_t busy = wall > waited ? wall - waited : 0;
    if (busy > worst_ns_) worst_ns_ = busy;
    // Waiting in epoll costs next to no CPU: the difference is the iteration's own work.
    const uint64_t used = cpu > last_cpu_ns_ ? cpu - last_cpu_ns_ : 0;
    if (used > worst_cpu_ns_) worst_cpu_ns_ = used;
    if (trace_ns_ != 0) {
      auto noted = SlowCall::take_noted();
      if (busy >= trace_ns_) report_trace(busy, used, now - wall, noted);
    }
  }
  last_ns_ = now;
  last_idle_ns_ = idle;
  last_cpu_ns_ = cpu;
}

}  // namespace motor::reactor
