// At most a fixed number of turns of some work per loop iteration (the runner: client requests
// answered), so a burst that arrives at once (twenty exec.run read in one poll) is spread over
// several iterations instead of stalling every other client for all of it at once. Work past the
// cap waits: its `resume` runs in a later iteration, in the order it began to wait, before any
// work that asks for a turn after it. The count is reset just before each poll, so an iteration
// as the stall meter sees it (prepare to prepare: the poll's callbacks, then the next
// iteration's timers and idle callbacks) never holds more than the cap.
#pragma once

#include <uv.h>

#include <cstddef>
#include <deque>
#include <functional>

#include "reactor/uv_handle.hpp"

namespace motor::reactor {

class TurnsPerIteration {
 public:
  // If its handles cannot be made, every take() succeeds: no cap (every request is still served).
  TurnsPerIteration(uv_loop_t* loop, size_t turns);
  TurnsPerIteration(const TurnsPerIteration&) = delete;
  TurnsPerIteration& operator=(const TurnsPerIteration&) = delete;

  bool capped() const { return prepare_.live() && idle_.live(); }
  // Takes one turn of this iteration's: false if none is left or others wait for one (then
  // wait()).
  bool take();
  // `resume` runs once, in a later iteration with a turn left; it may take() again (and wait
  // again, behind those already waiting).
  void wait(std::function<void()> resume);
  size_t waiting() const { return waiters_.size(); }

 private:
  void on_idle();

  size_t turns_;
  size_t left_;
  bool resuming_ = false;  // inside a waiter's resume: it has its turn ahead of new work
  std::deque<std::function<void()>> waiters_;
  UvHandle<uv_prepare_t> prepare_;  // resets the count right before each poll
  UvHandle<uv_idle_t> idle_;        // while anyone waits: the poll does not block, waiters resume
};

}  // namespace motor::reactor
