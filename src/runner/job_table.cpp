#include "runner/job_table.hpp"

#include <algorithm>

namespace motor::runner {

Job* JobTable::find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Job& JobTable::add(std::unique_ptr<Job> job) {
  auto& slot = jobs_[job->id()];
  slot = std::move(job);
  return *slot;
}

size_t JobTable::running() const {
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->state() == Job::State::kRunning;
  return n;
}

int64_t JobTable::memory_reserved() const {
  int64_t sum = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->state() == Job::State::kRunning) sum += job->memory_bytes();
  }
  return sum;
}

double JobTable::cpus_claimed() const {
  double claimed = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->state() == Job::State::kRunning) claimed += static_cast<double>(job->cpus().cpus.size());
  }
  return claimed;
}

bool JobTable::running_in(const std::string& caller, const std::string& workspace_key) const {
  return std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& entry) {
    const Job& job = *entry.second;
    return job.state() == Job::State::kRunning && job.caller() == caller && job.workspace_key() == workspace_key;
  });
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
  size_t finished = 0;
  for (const auto& [id, job] : jobs_) finished += job->state() == Job::State::kFinished;
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > keep;) {
    if (it->second->state() == Job::State::kFinished && !it->second->has_followers()) {
      dropped(it->first);
      it = jobs_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

}  // namespace motor::runner
