// The jobs the runner knows (queued, running, finished and kept), by id: UUIDv7 ids sort by
// creation time, so the map's order is the jobs' age. Sums over the running ones are the
// admission's inputs (memory, CPUs, slots); they walk only the jobs not yet finished (an index
// beside the map), never the thousands of finished ones a runner keeps. The finished ones are
// indexed by their end too, so the history sweep visits only those past their age.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runner/job.hpp"

namespace motor::runner {

class JobTable {
 public:
  using Map = std::map<std::string, std::unique_ptr<Job>>;

  Job* find(const std::string& id) const;
  Job& add(std::unique_ptr<Job> job);
  const Map& all() const { return jobs_; }
  size_t size() const { return jobs_.size(); }

  size_t running() const;
  int64_t memory_reserved() const;  // the running jobs' memory limits
  double cpus_claimed() const;      // the running jobs' CPUs
  // A job of this caller's workspace other than `except` is running (its workspace may not be
  // rewritten now).
  bool running_in(const std::string& caller, const std::string& workspace_key, const Job* except = nullptr) const;
  // The running jobs, oldest first.
  std::vector<Job*> running_jobs() const;
  // Finished jobs that ended at or before `ended_by_ms`, oldest end first: `expire(job)` says
  // whether the job is done with (its history removed or gone); one that is not (it has a
  // follower now) is offered again at the next call. At most `most` jobs are offered: true if
  // more are due (the caller sweeps again in a later loop iteration).
  bool sweep_ended(int64_t ended_by_ms, const std::function<bool(Job&)>& expire, size_t most);
  // The newest jobs `visible` admits, oldest first, at most `limit`; *truncated if there are more.
  std::vector<const Job*> newest(const std::function<bool(const Job&)>& visible, size_t limit, bool* truncated) const;
  // Finished jobs nobody follows, oldest first, until at most `keep` finished ones are left;
  // `dropped(id)` runs for each before it goes.
  void evict_finished(size_t keep, const std::function<void(const std::string& id)>& dropped);

  // For the job table on disk (state_saving.cpp): `each` gets every job whose row may differ
  // from the one last saved (every job not yet finished, and a finished one once), and the ids
  // evicted since the last call are moved into `removed`.
  void take_unsaved(const std::function<void(Job&)>& each, std::vector<std::string>& removed);
  // A job restored exactly as its saved row says (recovery): nothing to save for it.
  void mark_saved(const std::string& id) { unsaved_.erase(id); }
  // A saved row of no job in the table (an id recovery refused): deleted with the next save.
  void note_removed(const std::string& id) { removed_.push_back(id); }

 private:
  // Moves the jobs that finished since from the unfinished index to the end index (a job never
  // leaves kFinished).
  void prune_unfinished() const;

  Map jobs_;
  mutable std::map<std::string, Job*> unfinished_;  // a superset of the jobs not finished
  mutable std::set<std::pair<int64_t, std::string>> by_end_;  // finished jobs: (finished_at_ms, id)
  std::set<std::string> unsaved_;
  std::vector<std::string> removed_;
};

}  // namespace motor::runner
