#include "reactor/turns_per_iteration.hpp"

#include <utility>

#include "reactor/iteration_budget.hpp"

namespace motor::reactor {

TurnsPerIteration::TurnsPerIteration(uv_loop_t* loop, size_t turns) : turns_(turns), left_(turns) {
  if (prepare_.init(this, uv_prepare_init, loop) != 0 || idle_.init(this, uv_idle_init, loop) != 0) {
    prepare_.close();
    idle_.close();
    return;
  }
  const int rc = uv_prepare_start(prepare_.get(), [](uv_prepare_t* h) {
    if (auto* self = owner_of<TurnsPerIteration>(h)) self->left_ = self->turns_;
  });
  if (rc != 0) {
    prepare_.close();
    idle_.close();
    return;
  }
  uv_unref(prepare_.handle());  // never keeps the loop alive on its own
}

bool TurnsPerIteration::take() {
  if (!capped()) return true;
  if (left_ == 0 || (!waiters_.empty() && !resuming_)) return false;
  if (IterationBudget::defer()) return false;  // the iteration's budget is spent: a later one
  --left_;
  return true;
}

void TurnsPerIteration::wait(std::function<void()> resume) {
  if (!capped()) return resume();  // not reached: take() never refuses then
  waiters_.push_back(std::move(resume));
  if (uv_is_active(idle_.handle())) return;
  const int rc = uv_idle_start(idle_.get(), [](uv_idle_t* h) {
    if (auto* self = owner_of<TurnsPerIteration>(h)) self->on_idle();
  });
  if (rc != 0) {
    // Without the idle handle nothing would resume them: they get their turn now, uncapped.
    idle_.close();
    auto waiters = std::exchange(waiters_, {});
    for (auto& w : waiters) w();
  }
}

void TurnsPerIteration::on_idle() {
  // Each waiter resumed takes a turn (or has nothing left to do); one that runs out waits again,
  // behind the others. The iteration's turns left over from its poll are the ones used here.
  resuming_ = true;
  for (size_t n = waiters_.size(); n > 0 && left_ > 0 && !waiters_.empty() && !IterationBudget::exhausted(); --n) {
    auto resume = std::move(waiters_.front());
    waiters_.pop_front();
    resume();
  }
  resuming_ = false;
  if (waiters_.empty()) uv_idle_stop(idle_.get());
}

}  // namespace motor::reactor
