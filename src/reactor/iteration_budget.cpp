#include "reactor/iteration_budget.hpp"

namespace motor::reactor {
namespace {

thread_local IterationBudget* current = nullptr;

}  // namespace

IterationBudget::IterationBudget(uv_loop_t* loop, uint64_t budget_us) : loop_(loop), budget_ns_(budget_us * 1000) {
  if (budget_ns_ == 0) return;
  uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
  if (prepare_.init(this, uv_prepare_init, loop) != 0) return;
  const int rc = uv_prepare_start(prepare_.get(), [](uv_prepare_t* h) {
    if (auto* self = owner_of<IterationBudget>(h)) self->on_prepare();
  });
  if (rc != 0) {
    prepare_.close();
    return;
  }
  uv_unref(prepare_.handle());  // never keeps the loop alive on its own
  current = this;
}

IterationBudget::~IterationBudget() {
  if (current == this) current = nullptr;
}

void IterationBudget::on_prepare() {
  mark_ns_ = uv_hrtime();
  mark_idle_ns_ = uv_metrics_idle_time(loop_);
  starved_ = steps_ == 0 && left_ > 0;
  steps_ = 0;
  left_ = 0;
}

bool IterationBudget::spent() {
  if ((steps_ == 0 && starved_) || mark_ns_ == 0) return false;
  // Busy since the last prepare: the wall time less what the poll waited (libuv counts that).
  const uint64_t wall = uv_hrtime() - mark_ns_;
  const uint64_t waited = uv_metrics_idle_time(loop_) - mark_idle_ns_;
  return wall > waited && wall - waited >= budget_ns_;
}

bool IterationBudget::defer() {
  IterationBudget* b = current;
  if (!b) return false;
  if (b->spent()) {
    ++b->deferred_;
    ++b->left_;
    return true;
  }
  ++b->steps_;
  return false;
}

bool IterationBudget::exhausted() { return current && current->spent(); }

uint64_t IterationBudget::deferred_total() { return current ? current->deferred_ : 0; }

}  // namespace motor::reactor
