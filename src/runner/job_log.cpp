#include "runner/job_log.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "motor/sys_error.hpp"

namespace motor::runner {
namespace {

constexpr size_t kHeader = 5;  // 4-byte little-endian payload length, 1-byte kind

bool read_exact(int fd, uint64_t offset, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, buf + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string JobLog::segment_path(uint64_t id) const { return fmt::format("{}/log.{}", dir_, id); }

Status JobLog::start_segment(uint64_t id, int64_t first_seq, bool create) {
  const std::string path = segment_path(id);
  const int flags = O_RDWR | O_CLOEXEC | O_APPEND | (create ? O_CREAT | O_TRUNC : 0);
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) return sys_error((create ? "creating " : "opening ") + path);
  Segment seg;
  seg.id = id;
  seg.first_seq = first_seq;
  seg.fd = UniqueFd(fd);
  segments_.push_back(std::move(seg));
  return {};
}

Status JobLog::make_empty(const std::string& dir) {
  auto log = create(dir, 0);  // its fd closes here
  if (!log) return log.error();
  return {};
}

Expected<JobLog> JobLog::adopt(const std::string& dir, int64_t max_bytes) {
  JobLog log(dir, max_bytes);
  if (auto s = log.start_segment(0, 1, false); !s) return s.error();
  return log;
}

const JobLog::Segment* JobLog::find(uint64_t id) const {
  for (const auto& s : segments_) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

Expected<JobLog> JobLog::create(const std::string& dir, int64_t max_bytes) {
  if (mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) return sys_error("creating " + dir);
  JobLog log(dir, max_bytes);
  if (auto s = log.start_segment(0, 1); !s) return s.error();
  return log;
}

Expected<JobLog> JobLog::open(const std::string& dir, int64_t max_bytes, bool writable) {
  JobLog log(dir, max_bytes);
  std::vector<uint64_t> ids;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string_view name(e->d_name);
      if (name.rfind("log.", 0) == 0 && name.size() > 4 && name.size() < 24 &&
          std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        ids.push_back(std::stoull(std::string(name.substr(4))));
      }
    }
    closedir(d);
  } else {
    return sys_error("opening " + dir);
  }
  std::sort(ids.begin(), ids.end());
  if (ids.empty()) return make_error("io", "no log segments in " + dir);
  // Sequence numbers are implicit: the oldest kept segment's first seq is in a side file
  // written at rotation, and each later segment starts where the previous one ended.
  int64_t first_seq = 1;
  {
    const std::string side = dir + "/first_seq";
    int fd = ::open(side.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[32] = {};
      const ssize_t n = ::read(fd, buf, sizeof buf - 1);
      ::close(fd);
      if (n > 0) first_seq = std::max<int64_t>(1, std::atoll(buf));
    }
  }
  for (uint64_t id : ids) {
    const std::string path = log.segment_path(id);
    int fd = ::open(path.c_str(), (writable ? O_RDWR | O_APPEND : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return sys_error("opening " + path);
    Segment seg;
    seg.id = id;
    seg.first_seq = first_seq;
    seg.fd = UniqueFd(fd);
    struct stat st {};
    fstat(fd, &st);
    // Count whole records; a torn tail (the runner died mid-write) is cut off.
    uint64_t off = 0;
    char header[kHeader];
    while (off + kHeader <= static_cast<uint64_t>(st.st_size) && read_exact(fd, off, header, kHeader)) {
      uint32_t len = 0;
      for (int i = 3; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(header[i]);
      if (off + kHeader + len > static_cast<uint64_t>(st.st_size)) break;
      off += kHeader + len;
      ++first_seq;
    }
    if (writable && off != static_cast<uint64_t>(st.st_size) && ftruncate(fd, static_cast<off_t>(off)) < 0) {
      return sys_error("truncating the torn tail of " + path);
    }
    seg.size = off;
    log.segments_.push_back(std::move(seg));
  }
  log.next_seq_ = first_seq;
  return log;
}

Expected<int64_t> JobLog::append(Kind kind, std::string_view payload) {
  if (payload.size() > kMaxPayload) return make_error("internal", "log record too large");
  Segment* cur = &segments_.back();
  if (max_bytes_ > 0 && cur->size >= static_cast<uint64_t>(max_bytes_ / 2)) {
    // Rotate: drop the older segment, start a new one. Readers in the dropped one are told.
    if (auto s = start_segment(cur->id + 1, next_seq_); !s) return s.error();
    while (segments_.size() > 2) {
      unlink(segment_path(segments_.front().id).c_str());
      segments_.pop_front();
    }
    // Record where history now starts, for open() after a restart.
    const std::string side = dir_ + "/first_seq";
    const std::string text = fmt::format("{}\n", segments_.front().first_seq);
    int fd = ::open(side.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ssize_t ignored = ::write(fd, text.data(), text.size());
      (void)ignored;
      ::close(fd);
    }
    cur = &segments_.back();
  }
  char header[kHeader];
  const auto len = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>(len >> (8 * i));
  header[4] = static_cast<char>(kind);
  iovec iov[2] = {{header, kHeader}, {const_cast<char*>(payload.data()), payload.size()}};
  const ssize_t want = static_cast<ssize_t>(kHeader + payload.size());
  const ssize_t n = writev(cur->fd.get(), iov, 2);
  if (n != want) {
    const int err = n < 0 ? errno : ENOSPC;
    // Never leave a torn record behind: cut the file back to its last whole record.
    if (ftruncate(cur->fd.get(), static_cast<off_t>(cur->size)) < 0) { /* reported below */ }
    return sys_error(fmt::format("writing the job log in {}", dir_), err);
  }
  cur->size += static_cast<uint64_t>(want);
  return next_seq_++;
}

std::optional<std::string> JobLog::last_terminal() const {
  if (last_seq() < 1) return std::nullopt;
  auto cursor = cursor_at(last_seq());
  std::string scratch;
  if (!cursor) return std::nullopt;
  auto last = read(*cursor, scratch);
  if (!last || !*last || (*last)->kind != Kind::kRecord || !(*last)->payload.starts_with("{\"type\":\"terminal\"")) {
    return std::nullopt;
  }
  return std::string((*last)->payload);
}

Expected<JobLog::Cursor> JobLog::cursor_at(int64_t seq) const {
  Cursor c;
  const Segment* seg = nullptr;
  for (const auto& s : segments_) {
    if (s.first_seq <= seq) seg = &s;
  }
  if (!seg) {
    // Dropped: start at the oldest kept record.
    c.segment = segments_.front().id;
    c.next_seq = segments_.front().first_seq;
    return c;
  }
  c.segment = seg->id;
  c.next_seq = seg->first_seq;
  char header[kHeader];
  while (c.next_seq < seq && c.offset < seg->size) {
    if (!read_exact(seg->fd.get(), c.offset, header, kHeader)) return sys_error("reading the job log");
    uint32_t len = 0;
    for (int i = 3; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(header[i]);
    c.offset += kHeader + len;
    ++c.next_seq;
  }
  return c;
}

Expected<std::optional<JobLog::Entry>> JobLog::read(Cursor& c, std::string& scratch) const {
  std::optional<int64_t> truncated;
  const Segment* seg = find(c.segment);
  if (!seg) {
    // The reader's segment was dropped while it lagged: skip to the oldest kept record.
    truncated = segments_.front().first_seq;
    c.segment = segments_.front().id;
    c.offset = 0;
    c.next_seq = segments_.front().first_seq;
    seg = &segments_.front();
  }
  if (c.offset >= seg->size) {
    const Segment* next = find(c.segment + 1);
    if (!next) return std::optional<Entry>{};
    c.segment = next->id;
    c.offset = 0;
    seg = next;
    if (seg->size == 0) return std::optional<Entry>{};
  }
  char header[kHeader];
  if (!read_exact(seg->fd.get(), c.offset, header, kHeader)) return sys_error("reading the job log");
  uint32_t len = 0;
  for (int i = 3; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(header[i]);
  if (len > kMaxPayload) return make_error("io", "the job log is corrupt (record too large)");
  scratch.resize(len);
  if (len > 0 && !read_exact(seg->fd.get(), c.offset + kHeader, scratch.data(), len)) return sys_error("reading the job log");
  Entry e;
  e.seq = c.next_seq;
  e.kind = static_cast<Kind>(header[4]);
  e.payload = scratch;
  e.truncated_before_seq = truncated;
  c.offset += kHeader + len;
  ++c.next_seq;
  return std::optional<Entry>(e);
}

}  // namespace motor::runner
