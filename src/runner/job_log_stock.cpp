#include "runner/job_log_stock.hpp"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

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
  while (ready_.size() + in_flight_ < keep_) {
    auto dir = std::make_shared<std::string>(fmt::format("{}/{}", spare_dir_, next_name_++));
    auto made = std::make_shared<Status>(make_error("internal", "not made"));
    std::weak_ptr<char> alive = alive_;
    auto queued = reactor::run_on_pool(
        loop_, [dir, made] { *made = JobLog::make_empty(*dir); },
        [this, dir, made, alive] {
          if (alive.expired()) return;  // the runner is gone: the next one finds this log ready
          --in_flight_;
          if (!*made) return log_warning("making a job log ahead: {}", made->error().message);
          ready_.push_back(std::move(*dir));
        });
    if (!queued) return log_warning("making a job log ahead: {}", queued.error().message);
    ++in_flight_;
  }
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
