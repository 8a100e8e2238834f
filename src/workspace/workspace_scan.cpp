// After a job: what it changed in its workspace, scanned in the sandbox against the prepared
// tree; and the prepared tree's file list from the mirror.
#include "workspace/workspaces.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "base/log.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/slow_call.hpp"
#include "workspace/stat_walk.hpp"
#include "workspace/workspace_dir.hpp"
#include "workspace/workspace_names.hpp"
#include "workspace/workspaces_internal.hpp"

namespace motor::workspace {

using namespace detail;

namespace {

// What the job changed against the prepared tree (the runner's index), then the state of a
// .git the job made (only if it is a real directory), read with commands that run no hooks,
// filters or fsmonitor; every command-line override in git_env() applies on top of its config.
constexpr const char* kScanScript = R"sh(set -u
export GIT_DIR=/meta/git GIT_WORK_TREE=/workspace GIT_INDEX_FILE=/meta/index
cd /workspace || exit 20
git status --porcelain=v1 -z --untracked-files=all --ignored=matching --no-renames || exit 20
printf '\nMOTOR-GIT-STATE\n'
unset GIT_WORK_TREE GIT_INDEX_FILE
if [ -d .git ] && [ ! -L .git ]; then
  export GIT_DIR=/workspace/.git
  echo present=1
  echo "head=$(git rev-parse -q --verify HEAD 2>/dev/null)"
  echo "ref=$(git symbolic-ref -q HEAD 2>/dev/null)"
  echo "index_tree=$(git write-tree 2>/dev/null)"
  echo "stash_count=$(git rev-list --walk-reflogs --count refs/stash 2>/dev/null || echo 0)"
else
  echo present=0
fi
)sh";

}  // namespace

namespace {

// Where the filesystem's clock is read for a workspace's baseline: the runner's git dir for it,
// which no job sees. Its filesystem must be the workspace's (the walk checks st_dev).
std::string clock_marker(const std::string& meta) { return meta + "/scan-clock"; }

// The quick check of a scan, off the loop (libuv's thread pool): a fresh stamp for the next
// baseline, and, if there is a baseline, whether any inode of the workspace changed since it.
struct QuickCheck {
  uv_work_t req{};
  std::string workspace, marker;
  std::shared_ptr<const void> baseline_owner;  // keeps `skip` and `since` alive
  const std::set<std::string>* skip = nullptr;
  FsStamp since;
  std::shared_ptr<ChangeFeed> feed;  // the baseline's, if it has one
  Expected<FsStamp> now = make_error("internal", "not run");
  std::optional<WalkVerdict> verdict;
  bool by_feed = false;                  // the feed heard of nothing: no walk
  std::shared_ptr<ChangeFeed> new_feed;  // started before a walk that found the tree unchanged
  std::string feed_refused;
  uint64_t started_ns = 0, walked_ns = 0;
  std::function<void(QuickCheck&)> then;
};

}  // namespace

void Workspaces::scan(const std::string& caller, const std::string& key, int64_t memory_bytes,
                      std::function<void(JobReport)> done, bool others_running) {
  const std::string k = id_key(caller, key);
  auto it = records_.find(k);
  if (it == records_.end()) return done(JobReport{});  // never prepared: nothing to compare with
  JobReport base;
  base.tree_hash = it->second.tree.tree;
  base.bundle_bytes = it->second.tree.bundle_bytes;
  ++busy_[k];
  if (others_running) {
    return scan_with_git(k, caller, key, memory_bytes, std::nullopt, std::move(base), std::move(done));
  }
  auto check = std::make_unique<QuickCheck>();
  check->workspace = it->second.tree.workspace_dir;
  check->marker = clock_marker(meta_dir(caller, key));
  if (const auto& b = it->second.baseline) {
    check->baseline_owner = b;
    check->skip = &b->skip;
    check->since = b->taken;
    check->feed = b->feed;
  }
  check->started_ns = uv_hrtime();
  check->then = [this, alive = alive_, k, caller, key, memory_bytes, base = std::move(base),
                 done = std::move(done)](QuickCheck& c) mutable {
    if (!*alive) return;
    auto rec = records_.find(k);
    if (rec != records_.end() && c.verdict && c.verdict->unchanged && rec->second.baseline.get() == c.baseline_owner.get()) {
      if (c.by_feed) {
        log_debug("workspace {}: scan answered from its baseline: its change feed heard of nothing ({} watches), in {} us", k,
                  c.feed->watches(), (c.walked_ns - c.started_ns) / 1000);
      } else {
        log_debug("workspace {}: scan answered from its baseline: {} inodes unchanged, walked in {} us{}", k,
                  c.verdict->entries, (c.walked_ns - c.started_ns) / 1000,
                  c.new_feed ? fmt::format("; change feed started ({} watches)", c.new_feed->watches())
                             : c.feed_refused.empty() ? std::string() : "; no change feed: " + c.feed_refused);
        if (c.new_feed) rec->second.baseline->feed = std::move(c.new_feed);
      }
      settle(k);
      const auto baseline = rec->second.baseline;
      return answer_scan(k, baseline->report, std::move(base), done);
    }
    if (c.verdict) log_debug("workspace {}: scanning in full after {} us: {}", k, (c.walked_ns - c.started_ns) / 1000, c.verdict->reason);
    if (!c.now) log_warning("workspace {}: no baseline for the next scan: {}", k, c.now.error().message);
    scan_with_git(k, caller, key, memory_bytes, c.now ? std::optional<FsStamp>(*c.now) : std::nullopt, std::move(base),
                  std::move(done));
  };
  check->req.data = check.get();
  const int rc = uv_queue_work(
      loop_, &check->req,
      [](uv_work_t* req) {
        auto& c = *static_cast<QuickCheck*>(req->data);
        c.now = filesystem_now(c.marker);
        if (c.skip && c.feed && !c.feed->changed()) {
          c.verdict = WalkVerdict{true, "", 0};
          c.by_feed = true;
        } else if (c.skip) {
          // The feed first, then the walk: the walk vouches up to now, the feed from its start.
          auto feed = ChangeFeed::start(c.workspace, *c.skip, &c.feed_refused);
          c.verdict = unchanged_since(c.workspace, *c.skip, c.since);
          if (c.verdict->unchanged) c.new_feed = std::move(feed);
        }
        c.walked_ns = uv_hrtime();
      },
      [](uv_work_t* req, int) {
        std::unique_ptr<QuickCheck> c(static_cast<QuickCheck*>(req->data));
        c->then(*c);
      });
  if (rc != 0) {
    log_warning("workspace {}: uv_queue_work: {}; scanning in full", k, uv_strerror(rc));
    QuickCheck& c = *check;
    c.now = make_error("internal", "uv_queue_work failed");
    return c.then(c);
  }
  (void)check.release();  // owned by the work request until its after-work callback
}

void Workspaces::scan_with_git(const std::string& k, const std::string& caller, const std::string& key,
                               int64_t memory_bytes, std::optional<FsStamp> stamp, JobReport base,
                               std::function<void(JobReport)> done) {
  auto it = records_.find(k);
  if (it == records_.end()) {
    settle(k);
    return done(std::move(base));
  }
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(it->second.tree.workspace_dir, meta_dir(caller, key), it->second.mirror, kScanScript);
  // git opens every .gitignore/.gitattributes it meets: one that is a FIFO (or a device) would
  // block it for good. The helper covers such files with an empty one in its own mount namespace.
  if (!control_weakened("scan-masks")) spec.argv.insert(spec.argv.begin() + 1, "--mask-special-git-files");  // test build only
  spec.env = git_env();
  spec.timeout_ms = kScanTimeoutMs;
  const uint64_t started_ns = uv_hrtime();
  run_helper(std::move(spec), memory_bytes, [this, alive = alive_, k, stamp, started_ns, base = std::move(base),
                                             done = std::move(done)](ChildResult r) mutable {
    if (!*alive) return;
    settle(k);
    auto rec = records_.find(k);
    std::optional<ChangeReport> report;
    if (r.ok() && !r.stdout_truncated) {
      reactor::SlowCall timed("parsing a changed-paths scan");
      report = parse_scan_output(r.out);
    }
    if (!report || rec == records_.end()) {
      if (rec != records_.end()) {
        rec->second.dirty = true;
        rec->second.baseline.reset();
      }
      base.fields.reset();
      log_warning("workspace {}: the changed-paths scan failed: {}", k, r.describe());
      return done(std::move(base));
    }
    log_debug("workspace {}: full scan (the sandbox helper's git status) in {} us", k, (uv_hrtime() - started_ns) / 1000);
    if (stamp) {
      auto b = std::make_shared<ScanBaseline>();
      b->taken = *stamp;
      b->skip.insert(report->ignored_dirs.begin(), report->ignored_dirs.end());
      b->report = *report;
      rec->second.baseline = std::move(b);
    } else {
      rec->second.baseline.reset();
    }
    answer_scan(k, *report, std::move(base), done);
  });
}

void Workspaces::answer_scan(const std::string& k, const ChangeReport& report, JobReport base,
                             std::function<void(JobReport)>& done) {
  auto rec = records_.find(k);
  if (rec == records_.end()) return done(std::move(base));
  base.fields = encode_report(report, rec->second.git);
  const bool git_moved = !(rec->second.git == report.git);
  rec->second.git = report.git;
  if (git_moved) {
    const auto slash = k.find('/');  // a caller's name holds no '/' (a path key does)
    if (auto st = save_record(k.substr(0, slash), k.substr(slash + 1), rec->second); !st) {
      log_error("workspace {}: saving its .git state: {}", k, st.error().message);
    }
  }
  rec->second.dirty = !report.changes.empty() || report.git.present;
  done(std::move(base));
}

void Workspaces::list_prepared_files(const std::string& caller, const std::string& key,
                                     std::function<void(Expected<std::vector<std::string>>)> done) {
  auto it = records_.find(id_key(caller, key));
  if (it == records_.end()) return done(make_error("workspace_setup_failed", "the workspace was never prepared"));
  ChildSpec spec;
  spec.file = s_.git;
  spec.argv = {s_.git, "--git-dir=" + it->second.mirror, "ls-tree", "-r", "-z", "--name-only", it->second.tree.commit};
  spec.env = git_env();
  spec.uid = s_.mirror_uid;
  spec.gid = s_.mirror_gid;
  spec.timeout_ms = kScanTimeoutMs;
  run_child(loop_, std::move(spec), [alive = alive_, done = std::move(done)](ChildResult r) {
    if (!*alive) return;
    if (!r.ok() || r.stdout_truncated) return done(make_error("workspace_setup_failed", "git ls-tree: " + r.describe()));
    std::vector<std::string> files;
    for (size_t at = 0; at < r.out.size();) {
      const size_t end = r.out.find('\0', at);
      if (end == std::string::npos) break;
      files.emplace_back(r.out.substr(at, end - at));
      at = end + 1;
    }
    done(std::move(files));
  });
}

}  // namespace motor::workspace
