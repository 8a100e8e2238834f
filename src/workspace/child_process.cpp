#include "workspace/child_process.hpp"

namespace motor::workspace {

void run_child(uv_loop_t* loop, ChildSpec spec, std::function<void(ChildResult)> done) {
  reactor::ChildProcess::run_detached(loop, spec, [done = std::move(done)](Expected<reactor::ChildExit> e) {
    if (!e) return done(ChildResult{{}, e.error().message});
    done(ChildResult{std::move(*e), {}});
  });
}

}  // namespace motor::workspace
