// Getting a commit into a workspace: its pack into the mirror (as the mirror account), the
// change screen for untrusted prepares, and the checkout in the sandbox as the job account.
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
#include "workspace/workspace_dir.hpp"
#include "workspace/workspace_names.hpp"
#include "workspace/workspaces_internal.hpp"
#include "workspace/change_screen.hpp"

namespace motor::workspace {

using namespace detail;

namespace {

Workspaces::Refusal setup_failed(std::string detail) {
  return Workspaces::Refusal{protocol::RefusalReason::kWorkspaceSetupFailed, std::move(detail), std::nullopt};
}

// Updates the workspace to exactly the commit's tree, in the sandbox as the job account, with
// the runner's git dir (/meta/git, objects from the read-only mirror) and index (/meta/index,
// which holds the stat data of the last checkout). First the commit must be in the mirror
// (exit 13) and its tree the announced one (exit 11): nothing has been touched then. Only
// files whose content differs are rewritten, so unchanged files keep their mtimes. "clean" (no
// job changed anything since the last checkout): a two-way read-tree from the last commit
// touches only the paths that differ between the two trees. Otherwise: a refresh re-hashes
// files whose stat data moved, a reset restores what jobs changed, and untracked files are
// removed; ignored ones (target/) stay. A .git a job made is removed either way. HEAD (the
// checked-out commit, for the next two-way read-tree and the scan's status) is written by the
// shell: a detached HEAD is the commit id on one line, and this git dir is the runner's own.
// Every process here costs ~10-20 ms on a loaded host, so the common path runs two gits. A new
// workspace with nothing in it yet ("new") needs only the checkout: nothing to refresh, restore
// or clean. One git writes the files: git's parallel checkout (checkout.workers=0) took 1.3-1.8x
// the time of one worker for 10,000 files on 2 CPUs (bench/README.md, "the first prepare").
// A new workspace whose repository has a warm target (bound at /warm, $4 the mirror commit it was
// built from) starts with a copy of it as target/, made as the job account (so it is the
// workspace's own). Cargo rebuilds a unit when a source it read is newer than the unit's outputs,
// so the files this tree shares with the warm target's get an mtime older than every output, and
// those that differ (the diff of the two commits) a fresh one; if anything of that fails, the copy
// is removed (a cold build, never a wrong one). Then the index takes the new stat data. With a
// spare of the warm target ready ($5 = spare), there is no copy here: the runner moves the spare
// in once this succeeded (workspace_warm_spares.cpp).
constexpr const char* kCheckoutScript = R"sh(set -u
commit=$1 tree=$2 mode=$3 warm=${4:-} spare=${5:-}
warm_target() {
  cd /workspace || return 1
  git diff --name-only -z --no-renames "$warm" "$commit" > /meta/warm.changed || return 1
  [ -n "$spare" ] || cp -R --reflink=auto --preserve=mode,timestamps /warm /workspace/target || return 1
  git ls-files -z | xargs -0 -r touch -h -c -d @946684800 -- || return 1  # 2000-01-01
  xargs -0 -r touch -h -c -- < /meta/warm.changed || return 1
  git update-index -q --refresh >/dev/null 2>&1
  return 0
}
export GIT_DIR=/meta/git GIT_WORK_TREE=/workspace GIT_INDEX_FILE=/meta/index
if [ ! -f /meta/git/HEAD ]; then
  env -u GIT_DIR -u GIT_WORK_TREE -u GIT_INDEX_FILE git init -q --bare /meta/git || exit 12
  git config core.bare false || exit 12
  mode=new
  for f in /workspace/* /workspace/.[!.]* /workspace/..?*; do
    if [ -e "$f" ] || [ -L "$f" ]; then mode=full; break; fi
  done
fi
echo /mirror/objects > /meta/git/objects/info/alternates || exit 12
got=$(git rev-parse -q --verify "$commit^{tree}") || { echo "the mirror has no commit $commit" >&2; exit 13; }
[ "$got" = "$tree" ] || { echo "the commit's tree is $got" >&2; exit 11; }
if [ -e /workspace/.git ] || [ -L /workspace/.git ]; then rm -rf /workspace/.git || exit 12; fi
if [ "$mode" = new ]; then
  git read-tree --reset -u "$commit" || exit 12
elif [ "$mode" != clean ] || ! git read-tree -m -u HEAD "$commit" 2>/dev/null; then
  # git would open (and block on) a FIFO or device named like one of its own files; the checkout
  # replaces the tree anyway.
  find /workspace \( -name .gitignore -o -name .gitattributes -o -name .gitmodules -o -name .mailmap \) \
    \( -type p -o -type s -o -type b -o -type c \) -delete 2>/dev/null
  git update-index -q --refresh >/dev/null 2>&1
  git read-tree --reset -u "$commit" || exit 12
  git clean -ffdq || exit 12
fi
if [ "$mode" = new ] && [ -n "$warm" ] && [ -d /warm ] && [ ! -e /workspace/target ] && [ ! -L /workspace/target ]; then
  if warm_target; then echo warm-target-ready; else echo "no warm target: starting cold" >&2; rm -rf /workspace/target; fi
  rm -f /meta/warm.changed
fi
echo "$commit" > /meta/git/HEAD || exit 12
)sh";

}  // namespace

void Workspaces::ingest_pack(const std::string& mirror, bool create, std::shared_ptr<UniqueFd> pack,
                             std::function<void(ChildResult)> done) {
  ChildSpec spec;
  spec.file = s_.git;
  spec.env = git_env();
  spec.uid = s_.mirror_uid;
  spec.gid = s_.mirror_gid;
  spec.timeout_ms = kMirrorTimeoutMs;
  spec.max_stdout_bytes = 64 * 1024;
  if (create) {
    spec.argv = {s_.git, "init", "-q", "--bare", mirror};
    return run_child(loop_, std::move(spec), [this, alive = alive_, mirror, pack, done = std::move(done)](ChildResult r) mutable {
      if (!*alive) return;
      if (!r.ok()) return done(std::move(r));
      ingest_pack(mirror, false, std::move(pack), std::move(done));
    });
  }
  // --strict: every object is fsck-checked and every object it links to must be in the pack or
  // already in the mirror, which holds only objects that passed this same check: so the
  // received commit is complete. --fix-thin: deltas against the mirror's objects are resolved.
  spec.argv = {s_.git, "--git-dir=" + mirror, "index-pack", "--stdin", "--fix-thin", "--strict"};
  spec.stdin_fd = pack->get();
  run_child(loop_, std::move(spec), std::move(done));
}

void Workspaces::screen_then_checkout(const std::string& caller, const std::string& key, Record next, std::string base,
                                      Checked then) {
  MirrorScreen spec{.git = s_.git, .env = git_env(), .uid = s_.mirror_uid, .gid = s_.mirror_gid, .mirror = next.mirror,
                    .base = base, .change = next.tree.commit};
  screen_in_mirror(loop_, std::move(spec), [this, alive = alive_, caller, key, base, next = std::move(next),
                                            then = std::move(then)](Expected<screen::Result> r) mutable {
    if (!*alive) return;
    if (!r || r->verdict != screen::Verdict::kMayExecute) {
      settle(id_key(caller, key));  // nothing of the change reached the workspace
      return then(Refusal{protocol::RefusalReason::kScreenRefused,
                          r ? screen::summary_line(*r, 1024) : "DO NOT EXECUTE: " + r.error().message, std::nullopt},
                  nullptr);
    }
    next.tree.screened_base = base;
    checkout(caller, key, std::move(next), std::move(then));
  });
}

void Workspaces::checkout(const std::string& caller, const std::string& key, Record next, Checked then) {
  const std::string k = id_key(caller, key);
  std::string workspace;
  {
    reactor::SlowCall timed("creating a workspace directory");
    auto ws = ensure_workspace_dir(s_.workspace_root, caller, key, s_.job_uid, s_.job_gid);
    Status meta = ensure_owned_dir(s_.state_dir + "/workspace-git/" + caller, 0700, 0, 0);
    if (meta) meta = ensure_owned_dir(meta_dir(caller, key), 0700, s_.job_uid, s_.job_gid);
    if (!ws || !meta) {
      settle(k);
      return then(setup_failed(!ws ? ws.error().message : meta.error().message), nullptr);
    }
    workspace = *ws;
  }
  next.tree.workspace_dir = workspace;
  // Clean only when this workspace was checked out by this runner and no job changed it since.
  auto current = records_.find(k);
  const bool clean = current != records_.end() && !current->second.dirty && current->second.mirror == next.mirror;
  // Only a workspace with no record may be new (the script checks that it is empty).
  std::optional<WarmTarget> warm;
  if (current == records_.end() && s_.warm_target) warm = s_.warm_target(caller, next.tree.repository_root);
  // A spare made ahead is taken whole (moved in once the checkout succeeded) instead of copied.
  std::optional<std::string> spare;
  if (warm) spare = take_warm_spare(caller, next.tree.repository_root, *warm);
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(workspace, meta_dir(caller, key), next.mirror, kCheckoutScript, warm ? warm->dir : "");
  spec.argv.push_back(next.tree.commit);
  spec.argv.push_back(next.tree.tree);
  spec.argv.push_back(clean ? "clean" : "full");
  if (warm) spec.argv.push_back(warm->source_commit);
  if (spare) spec.argv.push_back("spare");
  spec.env = git_env();
  spec.timeout_ms = kCheckoutTimeoutMs;
  spec.max_stdout_bytes = 64 * 1024;
  // Marked before anything is touched, unmarked once the checkout ended either way (a failure
  // below removes the record itself): see checkout_mark_path.
  const std::string mark = checkout_mark_path(caller, key);
  if (auto marked = mark_checkout(caller, key); !marked) {
    settle(k);
    return then(setup_failed(marked.error().message), nullptr);
  }
  const uint64_t checkout_start = uv_hrtime();
  run_helper(std::move(spec), 0, [this, alive = alive_, caller, key, k, mark, next = std::move(next), checkout_start,
                                  warmed = warm.has_value(), warm_in_use = warm ? warm->in_use : nullptr, spare,
                                  workspace, then = std::move(then)](ChildResult r) mutable {
    warm_in_use.reset();  // the copy is over
    if (!*alive) return;
    // The script says when the warm steps ran and succeeded (not for a tree that has a target of
    // its own). The spare goes in before the workspace counts as prepared (nothing runs in it
    // until then).
    const bool warm_ok = warmed && r.ok() && r.out.find("warm-target-ready") != std::string::npos;
    bool spare_placed = false;
    if (spare) {
      spare_placed = warm_ok && place_warm_spare(*spare, workspace);
      return_warm_spare(caller, next.tree.repository_root);
      if (spare_placed && s_.on_warm_spare) s_.on_warm_spare("taken");
    }
    if (warmed && r.ok()) want_warm_spare(caller, next.tree.repository_root);  // for the next new workspace
    settle(k);
    unlink(mark.c_str());
    if (!r.ok() && (r.exit_code == 11 || r.exit_code == 13)) {
      // Checked before anything was touched: the workspace and its record are as they were.
      return then(Refusal{r.exit_code == 11 ? protocol::RefusalReason::kTreeHashMismatch : protocol::RefusalReason::kBundleRejected,
                          "the workspace is unchanged; " + r.describe(), std::nullopt},
                  nullptr);
    }
    if (!r.ok()) {
      // The mirror has the tree; the workspace may be part-way: the next prepare redoes it.
      records_.erase(k);
      unlink(record_path(caller, key).c_str());
      return then(setup_failed("updating the workspace failed: " + r.describe()), nullptr);
    }
    if (warmed && !warm_ok) {
      log_info("a new workspace of {} starts cold: {}", next.tree.repository_root,
               r.err_tail.empty() ? "its tree has a target of its own" : r.err_tail);
    } else if (spare && !spare_placed) {
      log_info("a new workspace of {} starts cold: its warm spare could not be moved in", next.tree.repository_root);
    } else if (warmed) {
      log_info("a new workspace of {} starts from its warm target{}", next.tree.repository_root,
               spare ? " (a spare made ahead)" : "");
    }
    next.tree.prepared_at_ms = now_ms();
    next.tree.checkout_ms = static_cast<int64_t>((uv_hrtime() - checkout_start) / 1000000);
    next.git = GitState{};  // the checkout removed any .git a job made
    next.dirty = false;
    next.baseline.reset();  // the index and HEAD the last report was made against are gone
    if (auto st = save_record(caller, key, next); !st) return then(setup_failed(st.error().message), nullptr);
    records_[k] = next;
    then(std::nullopt, &records_[k]);
  });
}

}  // namespace motor::workspace
