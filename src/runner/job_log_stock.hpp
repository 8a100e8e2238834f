// New jobs' logs made ahead of time, off the loop: a directory with its empty first segment,
// ready to be renamed into place when a job is accepted. Making them (mkdir and creat on the
// state directory's ext4) cost an exec.run 0.2 ms of the loop, and several ms once the
// filesystem holds many recently deleted inodes (ext4's inode allocation then scans for them);
// a rename allocates no inode. A ready log left by an earlier runner is used again.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "motor/expected.hpp"
#include "runner/job_log.hpp"

namespace motor::runner {

class JobLogStock {
 public:
  // `spare_dir` (made if missing) must be on the jobs' directories' filesystem. The logs an
  // earlier runner left ready in it are taken into the stock now (on the loop, before it runs).
  JobLogStock(uv_loop_t* loop, std::string spare_dir, size_t keep);
  JobLogStock(const JobLogStock&) = delete;
  JobLogStock& operator=(const JobLogStock&) = delete;

  // Tops the stock up to `keep` on libuv's pool, in one batch, once it is down to half of it.
  void refill();
  // A new, empty log in `dir` (which must not exist): a ready one renamed there, else (the stock
  // is empty, or the rename failed) made on the spot, as JobLog::create does.
  Expected<JobLog> create(const std::string& dir, int64_t max_bytes);
  size_t ready() const { return ready_.size(); }

 private:
  uv_loop_t* loop_;
  std::string spare_dir_;
  size_t keep_;
  uint64_t next_name_ = 0;
  size_t in_flight_ = 0;  // logs of the batch being made
  std::deque<std::string> ready_;  // directories, each an empty log (JobLog::make_empty); no fd held
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // the pool's answers check it
};

}  // namespace motor::runner
