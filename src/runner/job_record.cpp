#include "runner/job_record.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "protocol/messages.hpp"
#include "protocol/output_frame.hpp"
#include "reactor/slow_call.hpp"
#include "base/log.hpp"
#include "runner/job_log_stock.hpp"
#include "runner/session.hpp"

namespace motor::runner {
namespace {
// How often a terminal record held back by a full disk is offered to the log again.
constexpr uint64_t kLogRetryMs = 1000;

// Sends one entry of the log to the session as its record; the bytes sent. `scratch` holds the
// entry's payload (JobLog::read).
size_t send_entry(Session& session, int64_t request_id, const JobLog::Entry& e, std::optional<int64_t> truncated,
                  std::string& scratch) {
  if (e.kind == JobLog::Kind::kRecord) {
    std::string record(e.payload);
    if (truncated) record = fmt::format("{{\"truncated_before_seq\":{},{}", *truncated, record.substr(1));
    std::string message = protocol::with_request_id(request_id, record);
    const size_t n = message.size();
    session.send(std::move(message));
    return n;
  }
  // An output record is built once, as its whole frame: binary (the log's bytes themselves, the
  // read buffer handed over) for a session that asked for it, else JSON with base64.
  const protocol::OutputHead head{request_id, e.seq, e.kind == JobLog::Kind::kStdout ? "stdout" : "stderr", truncated};
  if (session.binary_output()) {
    std::string frame_head = protocol::binary_output_frame_head(head, e.payload.size());
    const size_t n = frame_head.size() + e.payload.size();
    session.send_frame(std::move(frame_head), std::move(scratch));  // e.payload is all of scratch
    scratch.clear();
    return n;
  }
  std::string frame = protocol::json_output_frame(head, e.payload);
  const size_t n = frame.size();
  session.send_frame(std::move(frame));
  return n;
}
}  // namespace

void remove_job_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string_view n(e->d_name);
      if (n != "." && n != "..") unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

JobRecord::JobRecord(RecordHost& host, std::string job_id, RecordSettings settings)
    : host_(host), job_id_(std::move(job_id)), settings_(std::move(settings)) {}

Status JobRecord::create() {
  auto log = settings_.log_stock ? settings_.log_stock->create(settings_.dir, settings_.log_max_bytes)
                                 : JobLog::create(settings_.dir, settings_.log_max_bytes);
  if (!log) return log.error();
  log_.emplace(std::move(*log));
  return {};
}

Expected<int64_t> JobRecord::append(JobLog::Kind kind, std::string_view bytes) {
  if (!log_) return make_error("internal", "the job has no log");
  return log_->append(kind, bytes);
}

void JobRecord::append_record(const std::string& json) {
  if (auto seq = append(JobLog::Kind::kRecord, json); !seq) {
    log_job(job_id_, "cannot write a record to the job log: {}", seq.error().message);
    return;
  }
  pump_all();
}

void JobRecord::finish(std::string terminal_json) {
  finished_ = true;
  terminal_json_ = std::move(terminal_json);
  if (log_) append_terminal();
  pump_all();
  maybe_close_log();
}

void JobRecord::restore(std::string terminal_json) {
  finished_ = true;
  terminal_json_ = std::move(terminal_json);
}

void JobRecord::append_terminal() {
  auto seq = log_->append(JobLog::Kind::kRecord, terminal_json_);
  if (seq) {
    unlogged_terminal_.clear();
    return;
  }
  if (unlogged_terminal_.empty()) {
    log_job(job_id_, "cannot write the terminal record to the job log ({}); followers get it from memory, and "
            "writing it is retried", seq.error().message);
  }
  // Followers get it from memory meanwhile (pump); the log gets it once there is room.
  unlogged_terminal_ = terminal_json_;
  if (!terminal_retry_.live()) {
    if (const int rc = uv_timer_init(host_.loop(), terminal_retry_.get()); rc != 0) {
      log_job(job_id_, "uv_timer_init: {}; the terminal record is not written again", uv_strerror(rc));
      return;
    }
    terminal_retry_.initialized(this);
  }
  if (const int rc = uv_timer_start(terminal_retry_.get(), [](uv_timer_t* h) {
        auto* self = reactor::owner_of<JobRecord>(h);
        if (!self || !self->log_) return;
        self->append_terminal();
        if (self->unlogged_terminal_.empty()) self->maybe_close_log();
      }, kLogRetryMs, 0); rc != 0) {
    log_job(job_id_, "uv_timer_start: {}; the terminal record is not written again", uv_strerror(rc));
  }
}

void JobRecord::maybe_close_log() {
  // A finished job holds no fd: its log is opened again (read-only) for a replay.
  if (finished_ && followers_.empty() && unlogged_terminal_.empty()) log_.reset();
}

int64_t JobRecord::last_seq() const {
  return (log_ ? log_->last_seq() : 0) + (unlogged_terminal_.empty() ? 0 : 1);
}

bool JobRecord::expire() {
  if (!finished_ || has_followers()) return false;
  log_.reset();
  return true;
}

Status JobRecord::open_log_for_replay() {
  if (log_) return {};
  auto log = JobLog::open(settings_.dir, settings_.log_max_bytes, !finished_);
  if (!log) return log.error();
  log_.emplace(std::move(*log));
  // A terminal record the log never got (a full disk, then a restart) is served from memory.
  if (finished_ && !terminal_json_.empty() && !log_->last_terminal()) unlogged_terminal_ = terminal_json_;
  return {};
}

std::vector<JobRecord::Follower>::iterator JobRecord::find_follower(SessionId session, int64_t request_id) {
  return std::find_if(followers_.begin(), followers_.end(),
                      [&](const Follower& g) { return g.session == session && g.request_id == request_id; });
}

void JobRecord::follow(Session& session, int64_t request_id, int64_t from_seq) {
  if (auto s = open_log_for_replay(); !s) {
    protocol::TerminalRecord t;
    t.job_id = job_id_;
    t.outcome.kind = protocol::Outcome::Kind::kHistoryExpired;
    t.ran.reset();
    session.send(protocol::with_request_id(request_id, protocol::encode_terminal(t)));
    return;
  }
  Follower f{session.id(), request_id, {}, std::nullopt};
  // A finished job always ends a follow with its terminal record, even past the end.
  if (finished_ && from_seq > last_seq()) from_seq = last_seq();
  auto cursor = log_->cursor_at(from_seq);
  if (!cursor) {
    session.send(protocol::encode_error(request_id, "internal", cursor.error().message));
    return;
  }
  f.cursor = *cursor;
  if (from_seq < log_->first_kept_seq()) f.truncated_before_seq = log_->first_kept_seq();
  f.wants_pump = true;
  followers_.push_back(f);
  session.followed_jobs().push_back(job_id_);
  schedule_pump();
}

void JobRecord::schedule_pump() {
  if (fan_out_queued_) return;
  fan_out_queued_ = true;
  host_.schedule_fan_out(job_id_);
}

void JobRecord::unfollow(Session& session) {
  std::erase_if(followers_, [&](const Follower& f) { return f.session == session.id(); });
  maybe_close_log();
}

void JobRecord::session_drained(Session& session) {
  bool any = false;
  for (auto& f : followers_) {
    if (f.session == session.id()) any = f.wants_pump = true;
  }
  if (any) schedule_pump();
}

void JobRecord::pump_all() {
  reactor::SlowCall timed("sending a job's records", reactor::SlowCall::kTraceOnly);
  drop_stalled_followers();
  for (auto& f : followers_) f.wants_pump = true;
  if (!followers_.empty()) schedule_pump();
}

bool JobRecord::pump_slice(size_t& budget) {
  fan_out_queued_ = false;
  // pump() may remove the follower it serves (after the terminal record): find each by its key.
  std::vector<std::pair<SessionId, int64_t>> keys;
  for (const auto& f : followers_) {
    if (f.wants_pump) keys.emplace_back(f.session, f.request_id);
  }
  bool more = false;
  for (const auto& [sid, request_id] : keys) {
    auto it = find_follower(sid, request_id);
    if (it == followers_.end()) continue;
    if (budget == 0) {
      more = true;
      break;
    }
    it->wants_pump = false;
    const bool cut_short = pump(*it, &budget);
    if (cut_short) {
      auto again = find_follower(sid, request_id);
      if (again != followers_.end()) again->wants_pump = more = true;
    }
  }
  if (more) fan_out_queued_ = true;  // the runner queues it again
  return more;
}

void JobRecord::drop_stalled_followers() {
  const uint64_t now = uv_now(host_.loop());
  const uint64_t limit = static_cast<uint64_t>(settings_.stalled_client_timeout_s) * 1000;
  std::vector<std::pair<SessionId, int64_t>> dropped;
  for (const auto& f : followers_) {
    if (f.stalled_since_ms != 0 && now - f.stalled_since_ms >= limit) dropped.emplace_back(f.session, f.request_id);
  }
  for (auto [sid, request_id] : dropped) {
    auto it = find_follower(sid, request_id);
    const int64_t resume = it->cursor.next_seq;
    followers_.erase(it);
    Session* session = host_.find_session(sid);
    if (!session) continue;
    std::erase(session->followed_jobs(), job_id_);
    log_job(job_id_, "dropped a client that read nothing for {} s (it may reattach from seq {})",
            settings_.stalled_client_timeout_s, resume);
    // Queued behind what it has not read yet: it sees this once it reads again.
    session->send(protocol::encode_error(
        request_id, protocol::to_wire(protocol::ErrorCode::kStalled),
        fmt::format("this client read nothing for {} s while job {} had more output; reattach with exec.attach "
                    "from_seq {} (nothing is lost)",
                    settings_.stalled_client_timeout_s, job_id_, resume)));
  }
  if (!dropped.empty()) maybe_close_log();
}

bool JobRecord::pump(Follower& f, size_t* budget) {
  Session* found = host_.find_session(f.session);
  const int64_t request_id = f.request_id;
  if (!found) {  // closed meanwhile (its close unfollows; this is the belt to that brace)
    const SessionId gone = f.session;
    std::erase_if(followers_, [&](const Follower& g) { return g.session == gone; });
    maybe_close_log();
    return false;
  }
  Session& session = *found;
  bool done = false;
  if (session.has_room()) f.stalled_since_ms = 0;
  while (session.has_room()) {
    if (budget && *budget == 0) break;
    auto entry = log_->read(f.cursor, scratch_);
    if (!entry) {
      session.send(protocol::encode_error(request_id, "internal", entry.error().message));
      done = true;
      break;
    }
    if (!*entry) {
      // Past the log's end: a terminal record it could not take yet comes from memory.
      if (!unlogged_terminal_.empty() && f.cursor.next_seq == log_->last_seq() + 1) {
        session.send(protocol::with_request_id(request_id, unlogged_terminal_));
        ++f.cursor.next_seq;
      }
      break;
    }
    const auto& e = **entry;
    std::optional<int64_t> truncated = e.truncated_before_seq ? e.truncated_before_seq : f.truncated_before_seq;
    f.truncated_before_seq.reset();
    const size_t sent = send_entry(session, request_id, e, truncated, scratch_);
    if (budget) *budget -= std::min(*budget, sent);
  }
  // Once the job is finished and this follower has had its last record (the terminal one), the
  // follow is over, however that record reached it.
  if (finished_ && f.cursor.next_seq > last_seq()) done = true;
  if (!done && !session.has_room() && f.cursor.next_seq <= last_seq() && f.stalled_since_ms == 0) {
    f.stalled_since_ms = uv_now(host_.loop());
  }
  const bool cut_short = !done && budget && *budget == 0 && session.has_room() && f.cursor.next_seq <= last_seq();
  if (done) {
    std::erase(session.followed_jobs(), job_id_);
    std::erase_if(followers_, [&](const Follower& g) { return g.session == session.id() && g.request_id == request_id; });
    maybe_close_log();
  }
  return cut_short;
}

}  // namespace motor::runner
