#include "reactor/run_soon.hpp"

#include <memory>
#include <utility>

#include "reactor/uv_handle.hpp"

namespace motor::reactor {
namespace {

struct Soon {
  UvHandle<uv_timer_t> timer;
  std::function<void()> fn;
};

}  // namespace

Status run_soon(uv_loop_t* loop, std::function<void()> fn) {
  auto soon = std::make_unique<Soon>();
  soon->fn = std::move(fn);
  if (auto s = uv_status(soon->timer.init(soon.get(), uv_timer_init, loop), "a deferred call's timer"); !s) return s;
  const int rc = uv_timer_start(soon->timer.get(), [](uv_timer_t* h) {
    std::unique_ptr<Soon> self(owner_of<Soon>(h));  // closes the timer as it goes
    if (!self) return;
    auto run = std::move(self->fn);
    self.reset();
    run();
  }, 0, 0);
  if (auto s = uv_status(rc, "starting a deferred call's timer"); !s) return s;
  soon.release();  // owned by its timer from here on
  return {};
}

}  // namespace motor::reactor
