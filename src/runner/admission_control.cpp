#include "runner/admission_control.hpp"

#include "base/log.hpp"
#include "reactor/iteration_budget.hpp"

namespace motor::runner {
namespace {
// Queue-wait limits are checked a few times a second while anything waits.
constexpr uint64_t kQueueCheckMs = 250;
}  // namespace

Admission::Admission(uv_loop_t* loop, size_t max_queued, AdmissionHost& host)
    : loop_(loop), host_(host), queue_(max_queued) {}

size_t Admission::enqueue(QueueEntry entry, PendingStart pending) {
  awaiting_record_.insert(entry.job_id);
  pending_[entry.job_id] = std::move(pending);
  return queue_.push(std::move(entry));
}

void Admission::recorded(const std::string& job_id) {
  awaiting_record_.erase(job_id);
  schedule();
}

void Admission::remove(const std::string& job_id) {
  queue_.remove(job_id);
  pending_.erase(job_id);
  awaiting_record_.erase(job_id);
}

std::vector<std::string> Admission::stop() {
  stopped_ = true;
  std::vector<std::string> queued;
  while (!queue_.empty()) queued.push_back(queue_.pop_head().job_id);
  pending_.clear();
  awaiting_record_.clear();
  schedule();
  return queued;
}

// Starting a job costs milliseconds of system calls (cgroups, namespaces, clone): at most one job
// starts per loop iteration, so twenty arriving at once do not stall everyone else twenty times.
void Admission::schedule() {
  if (!starter_.live()) {
    if (const int rc = uv_idle_init(loop_, starter_.get()); rc != 0) {
      log_error("uv_idle_init: {}; queued jobs cannot start", uv_strerror(rc));
      return;
    }
    starter_.initialized(this);
    if (const int rc = uv_timer_init(loop_, queue_timer_.get()); rc != 0) {
      log_error("uv_timer_init: {}; queue-wait limits are not enforced", uv_strerror(rc));
    } else {
      queue_timer_.initialized(this);
    }
  }
  if (queue_.empty()) {
    uv_idle_stop(starter_.get());
    if (queue_timer_.live()) uv_timer_stop(queue_timer_.get());
    return;
  }
  if (const int rc = uv_idle_start(starter_.get(), [](uv_idle_t* h) {
        if (auto* self = reactor::owner_of<Admission>(h)) self->start_next();
      }); rc != 0) {
    log_error("uv_idle_start: {}", uv_strerror(rc));
  }
  if (queue_timer_.live() && !uv_is_active(queue_timer_.handle())) {
    if (const int rc = uv_timer_start(queue_timer_.get(), [](uv_timer_t* h) {
          if (auto* self = reactor::owner_of<Admission>(h)) self->expire();
        }, kQueueCheckMs, kQueueCheckMs); rc != 0) {
      log_error("uv_timer_start: {}", uv_strerror(rc));
    }
  }
}

void Admission::expire() {
  for (const auto& e : queue_.expire(uv_now(loop_))) {
    pending_.erase(e.job_id);
    awaiting_record_.erase(e.job_id);
    host_.queue_wait_exceeded(e.job_id);
  }
  if (queue_.empty()) uv_timer_stop(queue_timer_.get());
}

// One job per call, at most one call per loop iteration (the idle handle), and none in an
// iteration that has spent its budget on other heavy steps (reactor::IterationBudget): a start is
// 0.1-0.5 ms of the loop (the workspace directory, the policy, the starter's request).
void Admission::start_next() {
  if (reactor::IterationBudget::defer()) return;  // the idle handle stays active: a later iteration
  // A job whose workspace is busy (a prepare or the scan after a job of it runs) waits without
  // holding up other workspaces' jobs; otherwise FIFO: the first such job waits for room and
  // nothing jumps ahead of it.
  const QueueEntry* head = queue_.first_not([this](const QueueEntry& e) { return host_.waits_on_workspace(e.job_id); });
  if (!head || stopped_ || !host_.has_room_for(*head)) {
    uv_idle_stop(starter_.get());  // admission runs again when a job finishes or a workspace is idle
    return;
  }
  // The job's queued record must be durable before it runs (recovery then knows it was accepted),
  // or its command must wait for it (a Linux job's gate).
  auto pending = pending_.find(head->job_id);
  if (awaiting_record_.count(head->job_id) && (pending == pending_.end() || !host_.may_start_before_record(pending->second))) {
    uv_idle_stop(starter_.get());  // admission runs again when the job is recorded
    return;
  }
  const QueueEntry entry = *queue_.take(head->job_id);
  if (queue_.empty()) uv_idle_stop(starter_.get());
  awaiting_record_.erase(entry.job_id);
  if (pending == pending_.end()) return;
  PendingStart start = std::move(pending->second);
  pending_.erase(pending);
  host_.start_admitted(entry.job_id, std::move(start));
}

}  // namespace motor::runner
