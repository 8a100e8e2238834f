// Applies state changes to the job table (state.db) from a helper process, so the loop never
// waits for fsync (a commit costs milliseconds of disk flushes; DESIGN.md: what stalls the loop
// moves to a helper process, not a thread). The helper holds its own SQLite connection, opened
// after the fork. Changes are batched: while one transaction is being written, later changes
// queue and go together in the next one, in order, and each caller is told once a transaction
// that includes its change is durable.
//
// A write that fails (a full disk) rolls back whole and is retried on a timer with every change
// since; a waiter that gave a `failed` callback is told at once (the runner then refuses what it
// could not record), one without waits for a write that succeeds. A helper that dies is started
// again and given the changes it had in hand (applying a change twice is harmless); if it cannot
// be, the changes are applied on the loop.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::runner {

class StateWriter {
 public:
  struct Waiter {
    std::function<void()> durable;
    std::function<void(const Error&)> failed;  // null: wait for a retry that succeeds
  };
  StateWriter() = default;
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Forks the helper (call before any job exists: the child is a copy of the runner).
  Status start(uv_loop_t* loop, std::string state_dir);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Queues `change` (encode_change's JSON); each waiter hears once it is on disk, or that the
  // write that carried it failed.
  void write(std::string change, std::vector<Waiter> waiters);
  // A write failed and a retry is due: what is saved now may not be on disk.
  bool failing() const { return failing_; }
  // Lets the helper finish what it is writing, then ends it (blocking; for shutdown).
  void stop();
  // Once stopped (or never started): the changes not known to be durable (sent but unanswered,
  // and queued), in order, for the caller's own save on the loop; empty while a helper runs.
  std::vector<std::string> take_unsaved();

 private:
  Status start_helper();
  void send(std::vector<std::string> changes);
  void on_ack(ssize_t nread, const uv_buf_t* buf);
  void on_result(Status result);
  void helper_lost(const std::string& why);
  void end_helper();
  void send_next();

  uv_loop_t* loop_ = nullptr;
  std::string state_dir_;
  pid_t pid_ = -1;
  uint64_t last_restart_ms_ = 0;
  std::unique_ptr<reactor::UvHandle<uv_pipe_t>> pipe_;  // a new one for each helper
  reactor::UvHandle<uv_timer_t> retry_timer_;
  bool writing_ = false;
  bool failing_ = false;  // the last write failed; the next one waits for the retry timer
  std::vector<std::string> in_flight_;  // kept to hand to a restarted helper
  std::vector<Waiter> in_flight_waiters_;
  std::vector<std::string> next_;  // queued behind the write in flight, in order
  std::vector<Waiter> next_waiters_;
  char ack_buf_[64];
  std::string acks_;  // answers read so far (one may arrive in pieces)
};

}  // namespace motor::runner
