#include "runner/admission.hpp"

#include <algorithm>

namespace motor::runner {

size_t AdmissionQueue::push(QueueEntry entry) {
  auto& q = classes_[static_cast<int>(entry.priority)];
  q.push_back(std::move(entry));
  return *position(q.back().job_id);
}

std::optional<size_t> AdmissionQueue::position(const std::string& job_id) const {
  size_t pos = 0;
  for (const auto& q : classes_) {
    for (const auto& e : q) {
      ++pos;
      if (e.job_id == job_id) return pos;
    }
  }
  return std::nullopt;
}

bool AdmissionQueue::remove(const std::string& job_id) { return take(job_id).has_value(); }

const QueueEntry* AdmissionQueue::head() const {
  for (const auto& q : classes_) {
    if (!q.empty()) return &q.front();
  }
  return nullptr;
}

QueueEntry AdmissionQueue::pop_head() {
  for (auto& q : classes_) {
    if (!q.empty()) {
      QueueEntry e = std::move(q.front());
      q.pop_front();
      return e;
    }
  }
  return {};
}

const QueueEntry* AdmissionQueue::first_not(const std::function<bool(const QueueEntry&)>& waits) const {
  for (const auto& q : classes_) {
    for (const auto& e : q) {
      if (!waits(e)) return &e;
    }
  }
  return nullptr;
}

std::optional<QueueEntry> AdmissionQueue::take(const std::string& job_id) {
  for (auto& q : classes_) {
    auto it = std::find_if(q.begin(), q.end(), [&](const QueueEntry& e) { return e.job_id == job_id; });
    if (it != q.end()) {
      QueueEntry e = std::move(*it);
      q.erase(it);
      return e;
    }
  }
  return std::nullopt;
}

std::vector<QueueEntry> AdmissionQueue::expire(uint64_t now_ms) {
  std::vector<QueueEntry> out;
  for (auto& q : classes_) {
    for (auto it = q.begin(); it != q.end();) {
      if (it->deadline_ms <= now_ms) {
        out.push_back(std::move(*it));
        it = q.erase(it);
      } else {
        ++it;
      }
    }
  }
  return out;
}

}  // namespace motor::runner
