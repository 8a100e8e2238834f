#include "runner/job_log_stock.hpp"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/log.hpp"
#include "reactor/pool_work.hpp"

namespace motor::runner {

JobLogStock::JobLogStock(uv_loop_t* loop, std::string spare_dir, size_t keep)
    : loop_(loop), spare_dir_(std::move(spare_dir)), keep_(keep) {
  if (mkdir(spare_dir_.c_str(), 0700) < 0 && errno != EEXIST) {
    log_warning("cannot make {} ({}); job logs are made as jobs come", spare_dir_, std::strerror(errno));
    keep_ = 0;
    return;
  }
  DIR* d = opendir(spare_dir_.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string dir = spare_dir_ + "/" + name;
    if (JobLog::make_empty(dir)) ready_.push_back(dir);
    next_name_ = std::max<uint64_t>(next_name_, std::strtoull(name.c_str(), nullptr, 10) + 1);
  }
  closedir(d);
}

void JobLogStock::refill() {
  // One batch at a time, once the stock is down to half: each queued work wakes a pool thread,
  // which on a busy host takes the CPU from the loop (a burst of twenty exec.run paid it twenty
  // times, 2-5 ms of the loop each time: bench/README.md, "Session 20").
  if (keep_ == 0 || in_flight_ > 0 || ready_.size() > keep_ / 2) return;
  auto dirs = std::make_shared<std::vector<std::string>>();
  for (size_t i = ready_.size(); i < keep_; ++i) dirs->push_back(fmt::format("{}/{}", spare_dir_, next_name_++));
  auto made = std::make_shared<std::vector<Status>>();
  std::weak_ptr<char> alive = alive_;
  auto queued = reactor::run_on_pool(
      loop_,
      [dirs, made] {
        for (const std::string& dir : *dirs) made->push_back(JobLog::make_empty(dir));
      },
      [this, dirs, made, alive] {
        if (alive.expired()) return;  // the runner is gone: the next one finds these logs ready
        in_flight_ = 0;
        for (size_t i = 0; i < dirs->size(); ++i) {
          if (i < made->size() && (*made)[i]) {
            ready_.push_back(std::move((*dirs)[i]));
          } else if (i < made->size()) {
            log_warning("making a job log ahead: {}", (*made)[i].error().message);
          }
        }
      });
  if (!queued) return log_warning("making job logs ahead: {}", queued.error().message);
  in_flight_ = dirs->size();
}

Expected<JobLog> JobLogStock::create(const std::string& dir, int64_t max_bytes) {
  while (!ready_.empty()) {
    const std::string ready = std::move(ready_.front());
    ready_.pop_front();
    refill();
    if (::rename(ready.c_str(), dir.c_str()) == 0) return JobLog::adopt(dir, max_bytes);
    log_warning("cannot move a ready job log into {}: {}", dir, std::strerror(errno));
  }
  refill();
  return JobLog::create(dir, max_bytes);
}

}  // namespace motor::runner
