// Writes state.json from a helper process, so the loop never waits for fsync (a save costs
// several milliseconds of disk flushes; DESIGN.md: what stalls the loop moves to a helper
// process, not a thread). Saves are coalesced: while one is being written, later ones collapse
// into the newest, and each caller is told once a write that includes its change is durable.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::runner {

class StateWriter {
 public:
  using Done = std::function<void()>;
  StateWriter() = default;
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Forks the helper (call before any job exists: the child is a copy of the runner).
  Status start(uv_loop_t* loop, std::string state_dir);
  bool running() const { return pid_ > 0; }
  // Queues `text` as the next state.json; `done` callbacks run once it (or a newer text) is on disk.
  void write(std::string text, std::vector<Done> done);
  // Lets the helper finish what it is writing, then ends it (blocking; for shutdown).
  void stop();

 private:
  void send(std::string text);
  void on_ack(ssize_t nread, const uv_buf_t* buf);

  uv_loop_t* loop_ = nullptr;
  pid_t pid_ = -1;
  reactor::UvHandle<uv_pipe_t> pipe_;
  bool in_flight_ = false;
  std::vector<Done> in_flight_done_;
  std::optional<std::string> next_text_;
  std::vector<Done> next_done_;
  char ack_buf_[64];
};

}  // namespace motor::runner
