// The compile cache's sweeps, `cache.status` and `cache.clear` (docs/compile-cache.md,
// "Eviction, status and clear"). A sweep measures `<state_dir>/cache/fills/*`, `targets/*.*` and
// the shared `cache_paths` with one `du` child (off the loop), then, on the loop and against the
// fills as they are by then, applies cache_max_size and cache_max_age_s (plan_evictions): what
// goes is renamed into `trash/` at once (so exec.status is truthful from that moment) and removed
// by an `rm -rf` child. Sweeps run every cache_sweep_interval_s, after each fill, and for each
// `cache.status`; one at a time (a request during one gets the next).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"
#include "workspace/child_process.hpp"

namespace motor::runner {
namespace {

constexpr uint64_t kMeasureTimeoutMs = 600000;

bool is_hex(std::string_view s, size_t a, size_t b) {
  return (s.size() == a || s.size() == b) && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// fills/<name> or targets/<name>.<commit>: the repository's name and (for a target) its commit.
bool parse_item_path(std::string_view path, CacheItemKind& kind, std::string& name, std::string& commit) {
  constexpr size_t kNameLen = 32;
  if (path.starts_with("fills/") && is_hex(path.substr(6), kNameLen, kNameLen)) {
    kind = CacheItemKind::kFill;
    name = std::string(path.substr(6));
    return true;
  }
  if (!path.starts_with("targets/") || path.size() < 8 + kNameLen + 1 || path[8 + kNameLen] != '.') return false;
  kind = CacheItemKind::kTarget;
  name = std::string(path.substr(8, kNameLen));
  commit = std::string(path.substr(8 + kNameLen + 1));
  return is_hex(name, kNameLen, kNameLen) && is_hex(commit, 40, 64);
}

}  // namespace

Status Runner::start_cache_sweeps() {
  if (::mkdir((cache_fills_.root() + "/trash").c_str(), 0700) != 0 && errno != EEXIST) {
    return make_error("io", fmt::format("cannot make {}/trash: {}", cache_fills_.root(), std::strerror(errno)));
  }
  remove_in_cache("trash/*");  // what an earlier runner moved there
  const uint64_t every_ms = static_cast<uint64_t>(config_.cache_sweep_interval_s) * 1000;
  if (auto s = reactor::uv_status(cache_sweep_timer_.init(this, uv_timer_init, loop_), "the cache sweep timer"); !s) return s;
  if (auto s = reactor::uv_status(uv_timer_start(cache_sweep_timer_.get(), [](uv_timer_t* h) {
        if (auto* self = reactor::owner_of<Runner>(h)) self->sweep_cache();
      }, every_ms, every_ms), "starting the cache sweep timer");
      !s) {
    return s;
  }
  uv_unref(cache_sweep_timer_.handle());
  return {};
}

TargetUses::Use Runner::warm_target_used(const std::string& caller, const std::string& repository_root) {
  const std::string name = cache_fills_.name_of(caller, repository_root);
  metrics_.warm_target_hit();
  cache_fills_.mark_used(name, unix_now_ms());
  return target_uses_.hold(name);
}

void Runner::remove_in_cache(const std::string& relative_glob) {
  reactor::ChildSpec rm;
  rm.file = "/bin/sh";
  rm.argv = {"sh", "-c", "cd \"$1\" && shift && exec rm -rf -- $@", "sh", cache_fills_.root(), relative_glob};
  workspace::run_child(loop_, std::move(rm), [relative_glob](workspace::ChildResult r) {
    if (!r.ok()) log_error("{} in the compile cache was not removed: {}", relative_glob, r.describe());
  });
}

void Runner::sweep_cache(std::function<void()> then) {
  if (cache_sweeping_) {
    cache_sweep_again_ = true;
    if (then) cache_sweep_next_.push_back(std::move(then));
    return;
  }
  if (then) cache_sweep_waiters_.push_back(std::move(then));
  cache_sweeping_ = true;
  reactor::ChildSpec du;
  du.file = "/bin/sh";
  // Unmatched globs stay as words; du names them on stderr and exits 1 with the rest measured.
  du.argv = {"sh", "-c", "cd \"$1\" || exit 2; shift; set -- fills/* targets/*.* \"$@\"; "
                         "exec du -s -B1 --time --time-style=+%s -- \"$@\"",
             "sh", cache_fills_.root()};
  for (const auto& shared : config_.cache_paths) du.argv.push_back(shared);
  du.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  du.timeout_ms = kMeasureTimeoutMs;
  workspace::run_child(loop_, std::move(du), [this](workspace::ChildResult r) { cache_measured(std::move(r)); });
}

std::vector<CacheItem> Runner::cache_items(const std::vector<MeasuredPath>& measured) const {
  std::vector<CacheItem> items;
  const auto& repos = cache_fills_.repositories();
  for (const MeasuredPath& m : measured) {
    CacheItem item;
    std::string commit;
    if (!parse_item_path(m.path, item.kind, item.name, commit)) continue;
    item.path = m.path;
    item.bytes = m.bytes;
    item.last_used_ms = m.mtime_s * 1000;
    auto it = repos.find(item.name);
    if (it != repos.end()) {
      const RepositoryFill& f = it->second;
      item.last_used_ms = std::max(item.last_used_ms, f.last_used_ms);
      item.in_use = cache_in_use(item.name, f);
      item.newest_target = item.kind == CacheItemKind::kTarget && commit == f.published_commit;
    } else {
      item.in_use = target_uses_.in_use(item.name);
    }
    items.push_back(std::move(item));
  }
  return items;
}

void Runner::cache_measured(workspace::ChildResult r) {
  const bool measured = r.spawn_error.empty() && !r.timed_out && (r.exit_code == 0 || r.exit_code == 1);
  if (!measured) {
    log_error("the compile cache was not measured: {}", r.describe());
  } else {
    cache_measured_ = parse_du_output(r.out);
    cache_measured_at_ms_ = unix_now_ms();
    const CacheLimits limits{config_.cache_max_bytes, config_.cache_max_age_s};
    for (const Eviction& e : plan_evictions(cache_items(cache_measured_), limits, cache_measured_at_ms_)) {
      if (!evict_cache_item(e.item)) continue;
      metrics_.cache_evicted(reason_name(e.reason), e.item.bytes);
      log_info("compile cache: {} removed ({} bytes, {})", e.item.path, e.item.bytes, reason_name(e.reason));
    }
    int64_t fill = 0, target = 0, shared = 0;
    for (const MeasuredPath& m : cache_measured_) {
      (m.path.starts_with("/") ? shared : m.path.starts_with("fills/") ? fill : target) += m.bytes;
    }
    metrics_.set_cache_bytes("fill", fill);
    metrics_.set_cache_bytes("target", target);
    metrics_.set_cache_bytes("shared", shared);
  }
  cache_sweeping_ = false;
  for (auto& waiter : std::exchange(cache_sweep_waiters_, {})) waiter();
  if (std::exchange(cache_sweep_again_, false)) {
    cache_sweep_waiters_ = std::exchange(cache_sweep_next_, {});
    sweep_cache();
  }
}

bool Runner::evict_cache_item(const CacheItem& item) {
  const std::string& root = cache_fills_.root();
  const std::string trashed = fmt::format("trash/{}.{}", ++cache_trash_seq_, item.path.substr(item.path.find('/') + 1));
  if (::rename((root + "/" + item.path).c_str(), (root + "/" + trashed).c_str()) != 0) {
    if (errno != ENOENT) log_error("compile cache: cannot move {} away: {}", item.path, std::strerror(errno));
    return false;
  }
  // What it was measured at is gone: status and the byte gauges no longer count it.
  std::erase_if(cache_measured_, [&](const MeasuredPath& m) { return m.path == item.path; });
  if (item.kind == CacheItemKind::kTarget && item.newest_target) {
    ::unlink((root + "/targets/" + item.name).c_str());
    ::unlink((root + "/targets/" + item.name + ".record").c_str());
    cache_fills_.forget_build(item.name);  // exec.status: never built
    warm_target_gone(item.name);
  }
  remove_in_cache(trashed);
  return true;
}

}  // namespace motor::runner
