// Admission on the loop: the queue of accepted jobs (AdmissionQueue orders them), what each needs
// to start, and the loop handles that start one job per iteration and expire queue-wait limits.
// The host (the runner) decides whether a job fits and starts it; this unit decides when to ask.
#pragma once

#include <uv.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "protocol/messages.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/host_workspace.hpp"
#include "runner/admission.hpp"
#include "runner/cache_fill_start.hpp"

namespace motor::runner {

// What starting a queued job needs, kept from its exec.run.
struct PendingStart {
  protocol::RunParams params;
  std::string rel_cwd;
  int64_t timeout_s = 0;
  int64_t memory_bytes = 0;
  int64_t cpus = 1;
  std::optional<HostWorkspaceRequest> host_workspace;  // (ext) a Buildbarn input root: host_workspace.hpp
  // params.env through the allow list once, at accept: `accepted` names what it held back, and
  // the job gets exactly what that said even if a reload changed the list while it queued.
  std::vector<std::pair<std::string, std::string>> forwarded_env;
  std::optional<FillStart> fill;  // a compile-cache fill job (runner/cache_fill.hpp), not a caller's
};

class AdmissionHost {
 public:
  virtual ~AdmissionHost() = default;
  // The job waits on something of its own (a prepare or scan of its workspace): it does not hold
  // up the jobs behind it.
  virtual bool waits_on_workspace(const std::string& job_id) const = 0;
  // There is room now (job slots, memory, CPUs).
  virtual bool has_room_for(const QueueEntry& entry) const = 0;
  // It may start before its record is durable (its command waits for it): Job::on_record.
  virtual bool may_start_before_record(const PendingStart& pending) const = 0;
  // Out of the queue: start it (or refuse it).
  virtual void start_admitted(const std::string& job_id, PendingStart pending) = 0;
  // It waited its whole queue-wait limit: refuse it.
  virtual void queue_wait_exceeded(const std::string& job_id) = 0;
};

class Admission {
 public:
  Admission(uv_loop_t* loop, size_t max_queued, AdmissionHost& host);

  bool full() const { return queue_.full(); }
  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  // 1-based position in start order, or nullopt if not queued.
  std::optional<size_t> position(const std::string& job_id) const { return queue_.position(job_id); }

  // Queues an accepted job; it starts no earlier than recorded(job_id), unless the host says it
  // may (its command then waits for the record itself). Returns its 1-based position.
  size_t enqueue(QueueEntry entry, PendingStart pending);
  // The job's queued record is durable: it may start.
  void recorded(const std::string& job_id);
  // Takes a job out of the queue (cancelled, refused, its workspace dropped).
  void remove(const std::string& job_id);
  // Shutdown: nothing starts any more; returns the queued jobs in start order, taken out.
  std::vector<std::string> stop();
  // Something changed (a job ended, a workspace went idle, a drain ended): look again.
  void schedule();

 private:
  void start_next();
  void expire();

  uv_loop_t* loop_;
  AdmissionHost& host_;
  AdmissionQueue queue_;
  std::map<std::string, PendingStart> pending_;
  // Jobs whose `accepted` waits for their first save: none starts before it is on record.
  std::set<std::string> awaiting_record_;
  bool stopped_ = false;
  reactor::UvHandle<uv_idle_t> starter_;
  reactor::UvHandle<uv_timer_t> queue_timer_;
};

}  // namespace motor::runner
