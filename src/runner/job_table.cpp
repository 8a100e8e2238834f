#include "runner/job_table.hpp"

#include <algorithm>
#include <iterator>

namespace motor::runner {

Job* JobTable::find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Job& JobTable::add(std::unique_ptr<Job> job) {
  const std::string id = job->id();
  auto& slot = jobs_[id];
  slot = std::move(job);
  unfinished_[id] = slot.get();
  unsaved_.insert(id);
  return *slot;
}

void JobTable::prune_unfinished() const {
  for (auto it = unfinished_.begin(); it != unfinished_.end();) {
    if (it->second->state() != Job::State::kFinished) {
      ++it;
      continue;
    }
    by_end_.emplace(it->second->finished_at_ms(), it->first);
    it = unfinished_.erase(it);
  }
}

size_t JobTable::running() const {
  prune_unfinished();
  size_t n = 0;
  for (const auto& [id, job] : unfinished_) n += job->state() == Job::State::kRunning;
  return n;
}

int64_t JobTable::memory_reserved() const {
  prune_unfinished();
  int64_t sum = 0;
  for (const auto& [id, job] : unfinished_) {
    if (job->state() == Job::State::kRunning) sum += job->memory_bytes();
  }
  return sum;
}

double JobTable::cpus_claimed() const {
  prune_unfinished();
  double claimed = 0;
  for (const auto& [id, job] : unfinished_) {
    if (job->state() == Job::State::kRunning) claimed += static_cast<double>(job->cpus().cpus.size());
  }
  return claimed;
}

bool JobTable::running_in(const std::string& caller, const std::string& workspace_key, const Job* except) const {
  prune_unfinished();
  return std::any_of(unfinished_.begin(), unfinished_.end(), [&](const auto& entry) {
    const Job& job = *entry.second;
    return &job != except && job.state() == Job::State::kRunning && job.caller() == caller &&
           job.workspace_key() == workspace_key;
  });
}

std::vector<Job*> JobTable::running_jobs() const {
  prune_unfinished();
  std::vector<Job*> running;
  for (const auto& [id, job] : unfinished_) {
    if (job->state() == Job::State::kRunning) running.push_back(job);
  }
  return running;
}

bool JobTable::sweep_ended(int64_t ended_by_ms, const std::function<bool(Job&)>& expire, size_t most) {
  prune_unfinished();
  size_t offered = 0;
  for (auto it = by_end_.begin(); it != by_end_.end() && it->first <= ended_by_ms;) {
    if (offered++ == most) return true;
    Job* job = find(it->second);
    it = !job || expire(*job) ? by_end_.erase(it) : std::next(it);
  }
  return false;
}

std::vector<const Job*> JobTable::newest(const std::function<bool(const Job&)>& visible, size_t limit,
                                         bool* truncated) const {
  std::vector<const Job*> found;
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && found.size() <= limit; ++it) {
    if (visible(*it->second)) found.push_back(it->second.get());
  }
  *truncated = found.size() > limit;
  if (*truncated) found.pop_back();
  std::reverse(found.begin(), found.end());
  return found;
}

void JobTable::evict_finished(size_t keep, const std::function<void(const std::string& id)>& dropped) {
  prune_unfinished();
  size_t finished = jobs_.size() - unfinished_.size();
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > keep;) {
    if (it->second->state() == Job::State::kFinished && !it->second->has_followers()) {
      dropped(it->first);
      unfinished_.erase(it->first);
      by_end_.erase({it->second->finished_at_ms(), it->first});
      unsaved_.erase(it->first);
      removed_.push_back(it->first);
      it = jobs_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

void JobTable::take_unsaved(const std::function<void(Job&)>& each, std::vector<std::string>& removed) {
  for (auto it = unsaved_.begin(); it != unsaved_.end();) {
    Job* job = find(*it);
    if (job) each(*job);
    // A finished job's row never changes again: saved once, it leaves the set.
    it = !job || job->state() == Job::State::kFinished ? unsaved_.erase(it) : std::next(it);
  }
  removed = std::move(removed_);
  removed_.clear();
}

}  // namespace motor::runner
