// A job's record history on disk: every record after `accepted`, numbered by seq from 1.
// Kept in at most two segment files; when the newer one fills half the size limit the older one
// is deleted, so a job's history is bounded and readers learn what was dropped.
// Readers hold cursors (segment, offset), so no per-record index is kept in memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::runner {

class JobLog {
 public:
  enum class Kind : uint8_t { kRecord = 0, kStdout = 1, kStderr = 2 };
  static constexpr size_t kMaxPayload = 256 * 1024;

  struct Entry {
    int64_t seq = 0;
    Kind kind = Kind::kRecord;
    std::string_view payload;  // valid until the next read with the same scratch buffer
    std::optional<int64_t> truncated_before_seq;
  };
  struct Cursor {
    uint64_t segment = 0;  // segment id
    uint64_t offset = 0;
    int64_t next_seq = 1;
  };

  // Creates `dir` (mode 0700) and an empty log in it.
  static Expected<JobLog> create(const std::string& dir, int64_t max_bytes);
  // Makes `dir` (mode 0700) an empty log's directory, for adopt() later (JobLogStock: ahead
  // of time, on libuv's pool). Holds no fd.
  static Status make_empty(const std::string& dir);
  // The empty log make_empty() made in `dir` (renamed there since), open for appending.
  static Expected<JobLog> adopt(const std::string& dir, int64_t max_bytes);
  // Opens an existing log after a restart (rebuilds seq numbers by scanning headers; a torn
  // tail is cut off). Not `writable`: read-only, for a replay of a finished job (nothing cut).
  static Expected<JobLog> open(const std::string& dir, int64_t max_bytes, bool writable = true);

  JobLog(JobLog&&) = default;
  JobLog& operator=(JobLog&&) = default;

  // Appends one record; returns its seq. On failure (a full disk) nothing is appended.
  Expected<int64_t> append(Kind kind, std::string_view payload);

  int64_t last_seq() const { return next_seq_ - 1; }
  int64_t first_kept_seq() const { return segments_.empty() ? next_seq_ : segments_.front().first_seq; }

  // A cursor at `seq` (or at the oldest kept record if `seq` was dropped).
  Expected<Cursor> cursor_at(int64_t seq) const;
  // Reads the record under the cursor and advances it; nullopt when the cursor is at the end.
  Expected<std::optional<Entry>> read(Cursor& cursor, std::string& scratch) const;

  const std::string& dir() const { return dir_; }
  // The last record, if it is a terminal record.
  std::optional<std::string> last_terminal() const;

 private:
  struct Segment {
    uint64_t id = 0;
    int64_t first_seq = 1;
    uint64_t size = 0;
    UniqueFd fd;
  };
  JobLog(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string segment_path(uint64_t id) const;
  // Opens segment `id` (made, and emptied, if `create`) for appending.
  Status start_segment(uint64_t id, int64_t first_seq, bool create = true);
  const Segment* find(uint64_t id) const;

  std::string dir_;
  int64_t max_bytes_;
  std::deque<Segment> segments_;
  int64_t next_seq_ = 1;
};

}  // namespace motor::runner
