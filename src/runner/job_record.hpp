// A job's record (docs/protocol.md "Records"): its log of records and output on disk, its terminal
// record once it ended (kept in memory while a full disk keeps it out of the log, and written
// again later), and the sessions that follow it, fed in slices. Knows nothing of how the job runs.
#pragma once

#include <uv.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/job_log.hpp"
#include "runner/session_id.hpp"

namespace motor::runner {

class Session;

// What a record needs of the runner: the loop, the sessions by id, and a turn in the fan-out.
class RecordHost {
 public:
  virtual ~RecordHost() = default;
  virtual uv_loop_t* loop() const = 0;
  // The open session with this id, or null once it has closed.
  virtual Session* find_session(SessionId id) const = 0;
  // The record has followers to feed (Runner: a slice per loop iteration, all jobs together).
  virtual void schedule_fan_out(const std::string& job_id) = 0;
};

class JobLogStock;

struct RecordSettings {
  std::string dir;  // the job's history directory
  int64_t log_max_bytes = 0;
  int64_t stalled_client_timeout_s = 0;  // a follower that reads nothing this long is dropped
  JobLogStock* log_stock = nullptr;  // where a new log comes from (else it is made on the spot)
};

// Removes a job's history directory (flat: log segments and a side file).
void remove_job_dir(const std::string& dir);

class JobRecord {
 public:
  JobRecord(RecordHost& host, std::string job_id, RecordSettings settings);
  JobRecord(const JobRecord&) = delete;
  JobRecord& operator=(const JobRecord&) = delete;

  // A new, empty log (a job that was just accepted).
  Status create();
  bool has_log() const { return log_.has_value(); }
  // The seq the next record gets.
  int64_t next_seq() const { return (log_ ? log_->last_seq() : 0) + 1; }
  // Output or a record into the log, without feeding followers (pump_all does).
  Expected<int64_t> append(JobLog::Kind kind, std::string_view bytes);
  // A record (started, ...) into the log; followers are fed.
  void append_record(const std::string& json);
  // The job ended with this terminal record: logged (or kept for followers and written again on a
  // timer), followers fed; the log closes once nobody follows.
  void finish(std::string terminal_json);
  // A job of an earlier runner: finished; its log is opened when someone follows it.
  void restore(std::string terminal_json);
  bool finished() const { return finished_; }
  const std::string& terminal_json() const { return terminal_json_; }

  // Streams the records from `from_seq` to the session, as replies to `request_id`.
  void follow(Session& session, int64_t request_id, int64_t from_seq);
  void unfollow(Session& session);
  void session_drained(Session& session);
  bool has_followers() const { return !followers_.empty(); }
  // Feeds the followers that have room and records to read, until `budget` bytes are sent. True
  // if some follower still has more to send now.
  bool pump_slice(size_t& budget);
  // Every follower may have more to read (new records, room again): queued for the next slice.
  void pump_all();
  // Finished and unfollowed: the log is closed and true (the caller deletes the directory).
  bool expire();

 private:
  struct Follower {
    SessionId session;  // looked up for each send: the session may have closed meanwhile
    int64_t request_id;
    JobLog::Cursor cursor;
    std::optional<int64_t> truncated_before_seq;  // to report on the next record sent
    uint64_t stalled_since_ms = 0;  // loop time its session first had no room for more; 0 = flowing
    bool wants_pump = false;        // has (or may have) records to send: fed in the next slice
  };
  void schedule_pump();
  void drop_stalled_followers();
  void append_terminal();
  void maybe_close_log();
  Status open_log_for_replay();
  // The last seq a follower can get: the log's, or one more for a terminal it lacks.
  int64_t last_seq() const;
  // Sends what `f` has room for (at most *budget bytes, if given); true if the budget ran out
  // with more to send.
  bool pump(Follower& f, size_t* budget = nullptr);
  std::vector<Follower>::iterator find_follower(SessionId session, int64_t request_id);

  RecordHost& host_;
  std::string job_id_;
  RecordSettings settings_;
  std::optional<JobLog> log_;
  bool finished_ = false;
  std::string terminal_json_;
  std::string unlogged_terminal_;  // the terminal record while the log cannot take it
  reactor::UvHandle<uv_timer_t> terminal_retry_;
  std::vector<Follower> followers_;
  bool fan_out_queued_ = false;
  std::string scratch_;
};

}  // namespace motor::runner
