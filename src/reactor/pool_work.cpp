#include "reactor/pool_work.hpp"

#include <memory>
#include <utility>

#include "base/cpu_policy.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::reactor {
namespace {

struct PoolWork {
  uv_work_t req{};
  std::function<void()> work, done;
};

}  // namespace

Status run_on_pool(uv_loop_t* loop, std::function<void()> work, std::function<void()> done) {
  auto job = std::make_unique<PoolWork>();
  job->work = std::move(work);
  job->done = std::move(done);
  job->req.data = job.get();
  const int rc = uv_queue_work(
      loop, &job->req, [](uv_work_t* req) { static_cast<PoolWork*>(req->data)->work(); },
      [](uv_work_t* req, int) {
        std::unique_ptr<PoolWork> self(static_cast<PoolWork*>(req->data));
        auto finish = std::move(self->done);
        self.reset();
        if (finish) finish();
      });
  if (auto s = uv_status(rc, "queueing work on libuv's pool"); !s) return s;
  job.release();  // owned by its request until the loop has run `done`
  return {};
}

Status start_pool_threads_as_batch() {
  return with_this_thread_batch([] {
    // libuv makes every pool thread at its first piece of work, on any loop, and keeps them for
    // the process's life: a loop of this call's own gives it that work.
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc == 0) {
      uv_work_t req{};
      rc = uv_queue_work(&loop, &req, [](uv_work_t*) {}, [](uv_work_t*, int) {});
      if (rc == 0) rc = uv_run(&loop, UV_RUN_DEFAULT);
      const int closed = uv_loop_close(&loop);
      if (rc == 0) rc = closed;
    }
    return uv_status(rc, "starting libuv's pool threads");
  });
}

}  // namespace motor::reactor
