// One run of motor-vm-helper (a libvirt call that would stall the loop) as a child process:
// started with uv_spawn and an empty environment, its one-line answer read from a pipe
// (bounded), its exit reaped by libuv. The callback runs on the loop, once.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::vm {

class HelperCall {
 public:
  // Ok: the text after "ok " (may be empty). Error: the helper's message.
  using Done = std::function<void(Expected<std::string>)>;
  // Starts `helper args...`; `done` runs once the helper exited (or was killed after timeout_ms).
  static Expected<std::unique_ptr<HelperCall>> start(uv_loop_t* loop, const std::string& helper,
                                                     const std::vector<std::string>& args, uint64_t timeout_ms, Done done);
  ~HelperCall();
  HelperCall(const HelperCall&) = delete;
  HelperCall& operator=(const HelperCall&) = delete;
  bool finished() const { return finished_; }

 private:
  HelperCall() = default;
  void maybe_done();

  reactor::UvHandle<uv_process_t> process_;
  reactor::UvHandle<uv_pipe_t> out_;
  reactor::UvHandle<uv_timer_t> timer_;
  std::string text_;
  bool exited_ = false, eof_ = false, finished_ = false, timed_out_ = false;
  int64_t exit_status_ = 0;
  std::string what_;
  Done done_;
  char buf_[4096];
};

}  // namespace motor::vm
