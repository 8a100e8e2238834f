// The admission queue: jobs that cannot start yet wait here in FIFO order per priority class
// (interactive before batch), each for at most its queue-wait limit. Pure: the runner decides
// whether the head fits (CPUs, memory, job slots) and asks the queue for it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace motor::runner {

// kFill: compile-cache fills (runner/cache_fill.hpp), after every caller's job.
enum class PriorityClass { kInteractive = 0, kBatch = 1, kFill = 2 };

struct QueueEntry {
  std::string job_id;
  PriorityClass priority = PriorityClass::kBatch;
  int64_t cpus = 1;
  int64_t memory_bytes = 0;
  uint64_t enqueued_ms = 0;  // monotonic
  uint64_t deadline_ms = 0;  // monotonic; past it the job is refused with queue_wait_exceeded
};

class AdmissionQueue {
 public:
  explicit AdmissionQueue(size_t max_entries) : max_(max_entries) {}

  bool full() const { return size() >= max_; }
  size_t size() const { return classes_[0].size() + classes_[1].size() + classes_[2].size(); }
  bool empty() const { return size() == 0; }

  // Appends to the entry's class; returns its 1-based position in the whole queue.
  size_t push(QueueEntry entry);
  // 1-based position (interactive entries come first), or nullopt if not queued.
  std::optional<size_t> position(const std::string& job_id) const;
  bool remove(const std::string& job_id);
  // The next entry to start: the oldest interactive one, else the oldest batch one.
  const QueueEntry* head() const;
  QueueEntry pop_head();
  // The first entry in head() order for which `waits` is false: an entry that waits on something
  // of its own (a prepare or scan of its workspace) does not hold up the entries behind it.
  const QueueEntry* first_not(const std::function<bool(const QueueEntry&)>& waits) const;
  // Removes and returns the entry with this id, if it is queued.
  std::optional<QueueEntry> take(const std::string& job_id);
  // Removes and returns every entry whose deadline has passed.
  std::vector<QueueEntry> expire(uint64_t now_ms);

 private:
  size_t max_;
  std::deque<QueueEntry> classes_[3];
};

}  // namespace motor::runner
