// The runner's side of sessions: who may connect (allowed_uids/groups, per-account caps), idle and
// frame timeouts, the bytes queued to all clients together (client_buffer_total), and the
// fan-out of job records to followers in bounded slices.
#include <grp.h>
#include <pwd.h>

#include <algorithm>

#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"

namespace motor::runner {

bool Runner::peer_allowed(const Session& session) const {
  if (session.privileged() || session.from_bridge_account()) return true;
  if (std::find(config_.allowed_uids.begin(), config_.allowed_uids.end(), session.peer_uid()) != config_.allowed_uids.end()) {
    return true;
  }
  std::vector<gid_t> groups{session.peer_gid()};
  char buf[4096];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(session.peer_uid(), &pw, buf, sizeof buf, &found) == 0 && found) {
    int n = 256;
    groups.resize(static_cast<size_t>(n));
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) >= 0) groups.resize(static_cast<size_t>(n));
    else groups = {session.peer_gid()};
  }
  for (const auto& name : config_.allowed_groups) {
    if (group* g = getgrnam(name.c_str())) {
      if (std::find(groups.begin(), groups.end(), g->gr_gid) != groups.end()) return true;
    }
  }
  return false;
}

void Runner::session_opened(Session* session) {
  auto refuse = [session](std::string_view code, const std::string& message) {
    session->send(protocol::encode_error(std::nullopt, code, message));
    session->close_after_flush();
  };
  if (shutting_down_) return refuse("runner_draining", "the runner is shutting down");
  if (!peer_allowed(*session)) {
    log_warning("refused a connection from uid {} pid {}: not in allowed_uids or allowed_groups", session->peer_uid(),
                session->peer_pid());
    return refuse("unauthorized", "this account may not use the runner; ask the operator to add it to allowed_uids or "
                                  "one of allowed_groups");
  }
  if (sessions_.size() >= static_cast<size_t>(config_.max_sessions)) {
    return refuse("runner_full", "too many open sessions; try again later");
  }
  // One account cannot take every session (the operator's and the bridge's are not counted
  // here; a bridged caller is counted once it is named, in runner.identify).
  if (!session->privileged() && !session->from_bridge_account() &&
      sessions_of(*session) >= static_cast<size_t>(config_.max_sessions_per_uid)) {
    log_warning("refused a connection from uid {}: it has {} sessions open (max_sessions_per_uid)", session->peer_uid(),
                config_.max_sessions_per_uid);
    return refuse("runner_full", fmt::format("this account has {} sessions open, the most one account may have "
                                             "(max_sessions_per_uid); try again later",
                                             config_.max_sessions_per_uid));
  }
  sessions_.emplace(session->id(), session);
  if (!session_sweep_.live()) start_session_sweep();
}

void Runner::start_session_sweep() {
  if (const int rc = uv_timer_init(loop_, session_sweep_.get()); rc != 0) {
    log_error("uv_timer_init: {}; sessions have no idle or frame timeout", uv_strerror(rc));
    return;
  }
  session_sweep_.initialized(this);
  uv_unref(session_sweep_.handle());
  const uint64_t every_ms = 1000;
  if (const int rc = uv_timer_start(session_sweep_.get(), [](uv_timer_t* h) {
        if (auto* self = reactor::owner_of<Runner>(h)) self->sweep_sessions();
      }, every_ms, every_ms); rc != 0) {
    log_error("uv_timer_start: {}; sessions have no idle or frame timeout", uv_strerror(rc));
  }
}

size_t Runner::sessions_of(const Session& session) const {
  size_t n = 0;
  for (const auto& [sid, s] : sessions_) {
    if (s == &session || s->privileged() || s->bridged() != session.bridged()) continue;
    n += session.bridged() ? s->caller() == session.caller() : s->peer_uid() == session.peer_uid();
  }
  return n;
}

// A connection that began a frame and did not finish it, or that has nothing to wait for and
// sends nothing, holds a session slot for nothing: it is closed after its timeout.
void Runner::sweep_sessions() {
  cut_off_unread();
  const uint64_t now = uv_now(loop_);
  const uint64_t frame_ms = static_cast<uint64_t>(config_.frame_timeout_s) * 1000;
  const uint64_t idle_ms = static_cast<uint64_t>(config_.session_idle_timeout_s) * 1000;
  std::vector<std::pair<Session*, std::string>> expired;
  for (const auto& [sid, s] : sessions_) {
    if (s->closed()) continue;
    if (s->frame_begun_ms() != 0 && now - s->frame_begun_ms() >= frame_ms) {
      expired.emplace_back(s, fmt::format("a frame was begun and not finished within {} s (frame_timeout_s); "
                                          "closing this connection",
                                          config_.frame_timeout_s));
    } else if (s->quiet() && now - s->last_received_ms() >= idle_ms) {
      expired.emplace_back(s, fmt::format("this connection sent nothing and waited for nothing for {} s "
                                          "(session_idle_timeout_s); closing it",
                                          config_.session_idle_timeout_s));
    }
  }
  for (auto& [s, why] : expired) {
    log_info("session {} (uid {}): {}", s->caller(), s->peer_uid(), why);
    s->send(protocol::encode_error(std::nullopt, "session_timeout", why));
    s->close_after_flush();
  }
}

void Runner::buffered_changed(int64_t delta) {
  const bool had_room = buffered_has_room(), had_reply_room = replies_have_room();
  buffered_bytes_ += delta;
  buffered_peak_bytes_ = std::max(buffered_peak_bytes_, buffered_bytes_);
  // Back under the total (or the replies' reserve past it): followers and requests that paused
  // for it are served again.
  if ((!had_room && buffered_has_room()) || (!had_reply_room && replies_have_room())) wake_followers_ = true;
  if (!wake_followers_ || !saver_.live()) return;
  // After this iteration, not from inside a send, whose caller may be walking a job's followers.
  if (!shedder_.live()) {
    if (uv_check_init(loop_, shedder_.get()) != 0) return;
    shedder_.initialized(this);
  }
  if (uv_is_active(shedder_.handle())) return;
  if (const int rc = uv_check_start(shedder_.get(), [](uv_check_t* h) {
        uv_check_stop(h);
        if (auto* self = reactor::owner_of<Runner>(h)) self->wake_followers();
      }); rc != 0) {
    log_error("uv_check_start: {}", uv_strerror(rc));
  }
}

void Runner::wake_followers() {
  if (!std::exchange(wake_followers_, false)) return;
  for (const auto& [id, job] : jobs_.all()) {
    if (job->has_followers()) job->pump_all();
  }
  std::vector<SessionId> open;
  for (const auto& [sid, s] : sessions_) open.push_back(sid);
  for (SessionId sid : open) {
    if (Session* s = find_session(sid)) s->resume();
  }
}

// Followers are fed in slices of at most this many bytes per loop iteration, all jobs together:
// a fan-out to a thousand followers with room for 1 MiB each would otherwise encode and queue
// a gigabyte before the loop could serve anyone else.
constexpr size_t kFanOutSliceBytes = 4u << 20;

void Runner::schedule_fan_out(const std::string& job_id) {
  fan_out_jobs_.push_back(job_id);
  if (!fan_out_.live()) {
    if (const int rc = uv_idle_init(loop_, fan_out_.get()); rc != 0) {
      log_error("uv_idle_init: {}", uv_strerror(rc));
      return;
    }
    fan_out_.initialized(this);
  }
  if (uv_is_active(fan_out_.handle())) return;
  if (const int rc = uv_idle_start(fan_out_.get(), [](uv_idle_t* h) {
        if (auto* self = reactor::owner_of<Runner>(h)) self->fan_out_slice();
      }); rc != 0) {
    log_error("uv_idle_start: {}", uv_strerror(rc));
  }
}

void Runner::fan_out_slice() {
  size_t budget = kFanOutSliceBytes;
  // Jobs queued during this slice wait for the next one: each iteration's work stays bounded.
  for (size_t n = fan_out_jobs_.size(); n > 0 && budget > 0 && !fan_out_jobs_.empty(); --n) {
    const std::string id = std::move(fan_out_jobs_.front());
    fan_out_jobs_.pop_front();
    Job* job = jobs_.find(id);
    if (!job) continue;
    if (job->pump_slice(budget)) fan_out_jobs_.push_back(id);
  }
  if (fan_out_jobs_.empty()) uv_idle_stop(fan_out_.get());
}


void Runner::cut_off_unread() {
  if (buffered_has_room()) return;
  // At the total, the clients that hold a full buffer and have read nothing of it for
  // stalled_client_timeout_s are cut off: they hold what the clients that do read wait for.
  const uint64_t now = uv_now(loop_);
  const uint64_t grace_ms = static_cast<uint64_t>(config_.stalled_client_timeout_s) * 1000;
  std::vector<Session*> unread;
  for (const auto& [sid, s] : sessions_) {
    if (!s->closed() && s->unread() && now - s->last_read_by_client_ms() >= grace_ms) unread.push_back(s);
  }
  const size_t cut = unread.size();
  for (Session* s : unread) s->close();  // what it had not read is in the jobs' histories: it reattaches
  if (cut > 0) {
    log_warning("{} bytes queued to clients, at client_buffer_total; cut off {} client(s) that read nothing for {} s",
                buffered_bytes_, cut, config_.stalled_client_timeout_s);
  }
}

Session* Runner::find_session(SessionId id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

void Runner::session_closed(Session& session) {
  sessions_.erase(session.id());
  if (workspaces_) workspaces_->session_closed(static_cast<uint64_t>(session.id()));
  for (const auto& id : std::vector<std::string>(session.followed_jobs())) {
    if (Job* job = jobs_.find(id)) job->unfollow(session);
  }
  session.followed_jobs().clear();
  if (shutting_down_ && sessions_.empty() && jobs_.running() == 0) uv_stop(loop_);
}

void Runner::await_request_turn(Session& session) {
  request_turns_.wait([this, sid = session.id()] {
    if (Session* s = find_session(sid)) s->turn_came();  // else it closed meanwhile
  });
}

void Runner::session_drained(Session& session) {
  for (const auto& id : std::vector<std::string>(session.followed_jobs())) {
    if (Job* job = jobs_.find(id)) job->session_drained(session);
  }
}


}  // namespace motor::runner
