// One run of motor-vm-helper (a libvirt call that would stall the loop) as a child process
// (reactor/child_process) with an empty environment: its one-line answer read from stdout
// (bounded), its exit reaped on the loop. The callback runs on the loop, once.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/child_process.hpp"

namespace motor::vm {

class HelperCall {
 public:
  // Ok: the text after "ok " (may be empty). Error: the helper's message.
  using Done = std::function<void(Expected<std::string>)>;
  // Starts `helper args...`; `done` runs once the helper exited (or was killed after timeout_ms).
  static Expected<std::unique_ptr<HelperCall>> start(uv_loop_t* loop, const std::string& helper,
                                                     const std::vector<std::string>& args, uint64_t timeout_ms, Done done);
  // Dropped before the helper ended: the helper is killed (and reaped on the loop); `done` never runs.
  ~HelperCall() = default;
  HelperCall(const HelperCall&) = delete;
  HelperCall& operator=(const HelperCall&) = delete;
  bool finished() const { return finished_; }

 private:
  HelperCall() = default;
  void answered(reactor::ChildExit exit);

  std::unique_ptr<reactor::ChildProcess> child_;
  bool finished_ = false;
  std::string what_;
  Done done_;
};

}  // namespace motor::vm
