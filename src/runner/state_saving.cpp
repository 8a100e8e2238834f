// The job table's changes, saved once per loop iteration (Runner::request_save) into state.db,
// and the room checks that keep the state directory's filesystem able to take the next save.
#include <sys/statvfs.h>

#include "reactor/slow_call.hpp"
#include "base/log.hpp"
#include "runner/runner.hpp"
#include "base/sha256.hpp"

namespace motor::runner {

PersistedJob Runner::persisted(const Job& job) const {
  PersistedJob pj;
  pj.job_id = job.id();
  pj.caller = job.caller();
  pj.workspace_key = job.workspace_key();
  pj.summary = job.summary();
  pj.state = job.state();
  pj.cgroup = job.state() == Job::State::kRunning ? job.cgroup_name() : "";
  pj.created_at_ms = job.created_at_ms();
  pj.started_at_ms = job.started_at_ms();
  pj.terminal_json = job.terminal_json();
  if (job.secret_digest()) pj.secret_sha256 = to_hex(*job.secret_digest());
  return pj;
}

std::string Runner::take_state_change() {
  // Only what may have changed since the last save: the jobs not finished (queued, running) and
  // those that finished since, plus the ids evicted. Never the thousands of finished jobs kept.
  std::vector<std::string> rows, removed;
  jobs_.take_unsaved([&](Job& job) { rows.push_back(encode_job(persisted(job))); }, removed);
  return encode_change(draining_, rows, removed);
}

Status Runner::save_state() {
  reactor::SlowCall timed("saving the job table");
  std::vector<std::string> changes = state_writer_.take_unsaved();
  changes.push_back(take_state_change());
  const std::string text = join_changes(changes);
  last_state_bytes_ = text.size();
  auto s = apply_changes_now(config_.state_dir, text);
  if (!s) log_error("saving state: {}", s.error().message);
  return s;
}

void Runner::request_save(std::function<void()> then, std::function<void(const Error&)> failed) {
  if (then || failed) after_save_.push_back(StateWriter::Waiter{std::move(then), std::move(failed)});
  if (!saver_.live()) {  // before the loop runs (start-up): save now
    auto s = save_state();
    auto waiters = std::move(after_save_);
    after_save_.clear();
    for (auto& w : waiters) {
      if (s && w.durable) w.durable();
      if (!s && w.failed) w.failed(s.error());
    }
    return;
  }
  if (save_pending_) return;
  save_pending_ = true;
  if (const int rc = uv_check_start(saver_.get(), [](uv_check_t* h) {
        auto* self = reactor::owner_of<Runner>(h);
        if (!self) return;
        uv_check_stop(h);
        self->save_pending_ = false;
        auto waiters = std::move(self->after_save_);
        self->after_save_.clear();
        // Encoding what changed stays on the loop (microseconds); the transaction and its fsyncs
        // do not (without its helper process the writer makes them here).
        reactor::SlowCall timed("encoding a state change");
        std::string change = self->take_state_change();
        self->last_state_bytes_ = change.size();
        self->state_writer_.write(std::move(change), std::move(waiters));
      }); rc != 0) {
    log_error("uv_check_start: {}; state.json is saved now, on the loop", uv_strerror(rc));
    save_pending_ = false;
    saver_.close();
    request_save();
  }
}

int64_t Runner::free_disk_bytes() const {
  struct statvfs fs {};
  const std::string root = config_.effective_workspace_root();
  // The workspace root may not exist yet: its filesystem is then that of its parent.
  std::string path = root;
  while (statvfs(path.c_str(), &fs) != 0) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return -1;
    path.resize(slash);
  }
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

Status Runner::state_room() const {
  if (state_writer_.failing()) {
    return make_error("runner_disk_full", "the runner cannot save its state (see its log); new jobs are refused until it can");
  }
  struct statvfs state_fs {}, ws_fs {};
  if (statvfs(config_.state_dir.c_str(), &state_fs) != 0) return {};
  const int64_t free_bytes = static_cast<int64_t>(state_fs.f_bavail) * static_cast<int64_t>(state_fs.f_frsize);
  // A save appends its change to the WAL (and a checkpoint copies pages into state.db); the
  // job's log and its records need a little more.
  int64_t needed = 2 * static_cast<int64_t>(last_state_bytes_) + kStateSaveHeadroomBytes;
  // On the workspaces' filesystem the operator's floor is kept free besides.
  std::string ws = config_.effective_workspace_root();
  while (statvfs(ws.c_str(), &ws_fs) != 0 && ws.rfind('/') != std::string::npos && ws.rfind('/') > 0) ws.resize(ws.rfind('/'));
  if (ws_fs.f_fsid == state_fs.f_fsid) needed += config_.disk_free_floor_bytes;
  if (free_bytes >= needed) return {};
  return make_error("runner_disk_full", fmt::format("{} KiB free on the state directory's filesystem, below the {} KiB "
                                                    "that recording a job needs",
                                                    free_bytes >> 10, needed >> 10));
}

}  // namespace motor::runner
