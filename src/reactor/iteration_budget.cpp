#include "reactor/iteration_budget.hpp"

namespace motor::reactor {
namespace {

thread_local IterationBudget* current = nullptr;

}  // namespace

IterationBudget::IterationBudget(const StallMeter& meter, uint64_t budget_us)
    : meter_(meter), budget_ns_(budget_us * 1000) {
  if (budget_ns_ != 0) current = this;
}

IterationBudget::~IterationBudget() {
  if (current == this) current = nullptr;
}

void IterationBudget::follow_iteration() {
  const uint64_t now = meter_.iterations();
  if (now == iteration_) return;
  // An iteration that asked nothing left nothing: only the one just before counts.
  starved_ = now == iteration_ + 1 && steps_ == 0 && left_ > 0;
  iteration_ = now;
  steps_ = 0;
  left_ = 0;
}

bool IterationBudget::spent() {
  follow_iteration();
  if (steps_ == 0 && starved_) return false;
  return meter_.busy_now_ns() >= budget_ns_;
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
