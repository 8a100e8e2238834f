// The runner's side of workspaces (issue 7, docs/workspaces.md): bundle transfers, the
// per-repository Git mirrors, updating a workspace to exactly a tree, dropping it, and the
// changed-path report after each job. Every git call runs as a child process (uv_spawn):
//  - on the mirror (bundle fetch, checks) as the mirror account (motor-cache), never as root;
//  - on a workspace (checkout, the scan) inside the job sandbox as the job account, through
//    motor-workspace-sandbox, with the runner's own git dir for that workspace: nothing a job
//    wrote into the workspace (a .git, hooks, config, symlinks) is ever used as git's config.
#pragma once

#include "motor/simdjson_fwd.hpp"
#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/messages.hpp"
#include "reactor/uv_handle.hpp"
#include "motor/unique_fd.hpp"
#include "workspace/change_feed.hpp"
#include "workspace/change_report.hpp"
#include "workspace/child_process.hpp"
#include "workspace/stat_walk.hpp"

namespace motor::workspace {

// A repository's published warm target (docs/compile-cache.md "Warm workspaces"): a new workspace
// starts with a copy of it as its target/.
struct WarmTarget {
  std::string dir;            // host path of the published target directory
  std::string source_commit;  // the mirror's commit of the tree it was built from
  std::shared_ptr<void> in_use;  // held until the copy ends: eviction and `motor cache clear` wait
};

struct WorkspaceSettings {
  std::string state_dir;        // mirrors, transfers and the runner's per-workspace git dirs
  std::string workspace_root;   // <root>/<opaque id> (workspace_names.hpp)
  std::string sandbox_helper;   // motor-workspace-sandbox
  std::string init_path;        // motor-init (PID 1 in the helper's sandbox)
  std::string git = "/usr/bin/git";
  uid_t job_uid = 0;
  gid_t job_gid = 0;
  uid_t mirror_uid = 0;         // motor-cache: owns the mirrors and parses bundles
  gid_t mirror_gid = 0;
  int64_t max_bundle_bytes = int64_t{1} << 30;
  uint64_t transfer_idle_ms = 120000;  // an upload silent this long is discarded
  // Every sandbox helper run (checkout, scan, drop) is in a cgroup of its own with a memory limit
  // and the runner's pids limit: `helper_cgroup` makes one and returns its directories (one per
  // hierarchy), `release_helper_cgroup` takes them back once the helper has exited (the runner
  // kills anything left and removes them). Unset: no cgroup.
  std::function<Expected<std::vector<std::string>>(int64_t memory_bytes)> helper_cgroup;
  std::function<void(std::vector<std::string>)> release_helper_cgroup;
  int64_t helper_memory_bytes = int64_t{2} << 30;  // checkout and drop; a scan is charged its job's limit
  // The warm target a new workspace of (caller, repository_root) starts from. Unset: none.
  std::function<std::optional<WarmTarget>(const std::string& caller, const std::string& repository_root)> warm_target;
  // A spare per repository (docs/compile-cache.md "Spares made ahead"): a copy of its warm target
  // made while the host is quiet, which the next new workspace takes with one rename instead of
  // copying on its prepare's path. `host_quiet`: no job runs or waits (unset: never quiet).
  bool warm_spares = true;
  std::function<bool()> host_quiet;
  // Counts for the metrics: "made", "failed" (a spare's copy), "taken" (a new workspace took one).
  std::function<void(std::string_view what)> on_warm_spare;
};

// What a workspace was last prepared to (kept in memory and in <state>/workspace-git).
struct PreparedTree {
  std::string workspace_dir;    // host path of the workspace (what a job sees at /workspace)
  std::string repository_root;  // the caller's path of the checkout
  std::string commit, tree;
  int64_t bundle_bytes = 0;     // the last prepare's bundle (0: nothing had to be sent)
  int64_t prepared_at_ms = 0;
  int64_t fetch_ms = 0, checkout_ms = 0;  // (ext) the last prepare's two steps on the runner
  std::string screened_base;    // the base commit the change screen passed this tree from ("": not screened)
};

class Workspaces {
 public:
  // The answer to the request being served: its result (a JSON object), or an error (a code and
  // a message). The runner makes the reply frame of it.
  using Reply = std::function<void(Expected<std::string>)>;
  // Asked before a workspace is rewritten or removed: does a job of that workspace run?
  using JobsRunning = std::function<bool(const std::string& caller, const std::string& key)>;

  Workspaces(uv_loop_t* loop, WorkspaceSettings settings, JobsRunning jobs_running);
  ~Workspaces();
  Workspaces(const Workspaces&) = delete;
  Workspaces& operator=(const Workspaces&) = delete;

  // Creates the directories and reloads the records of prepared workspaces (start-up only).
  Status start();

  // workspace.prepare / workspace.upload / workspace.finish / workspace.list. `session` only
  // identifies the connection (the runner's session id, never reused): a transfer continues
  // only on the connection that opened it.
  // `refusal` is set by the runner when it takes no work (draining, disk full): a prepare is
  // then refused with it before anything else.
  struct Refusal {
    protocol::RefusalReason reason;
    std::string detail;
    std::optional<int64_t> retry_after_ms;
  };
  // `transfer_id`: a fresh id (the runner's UUIDv7), used if a bundle must be sent.
  void prepare(uint64_t session, const std::string& caller, const protocol::WorkspaceParams& p,
               std::string transfer_id, const std::optional<Refusal>& refusal, Reply reply);
  void upload(uint64_t session, const protocol::WorkspaceParams& p, Reply reply);
  void finish(uint64_t session, const std::string& caller, const protocol::WorkspaceParams& p, Reply reply);
  void list(const std::string& caller, Reply reply);
  // Removes the workspace (its files, the runner's git dir and record). The caller's jobs in it
  // must have been cancelled first. `done(existed)` runs once the files are gone.
  Status drop(const std::string& caller, const std::string& key, std::function<void(bool existed)> done);
  // A connection closed: its unfinished transfers are discarded (transfer_interrupted).
  void session_closed(uint64_t session);

  // The repository's published warm target changed (a fill published one; it was evicted or
  // cleared): its spare is discarded and, while one is published, a new one made once the host is
  // quiet.
  void warm_target_changed(const std::string& caller, const std::string& repository_root);
  // The host may have become quiet (a job ended): wanted spares are made a second later if it
  // still is then (a job started right after the last one is not slowed by a copy beside it).
  void poke_warm_spares();
  // A spare of the repository's warm target is wanted (start-up: one may be there already).
  void want_warm_spare(const std::string& caller, const std::string& repository_root);

  // A prepare is rewriting this workspace: its jobs wait.
  bool busy(const std::string& caller, const std::string& key) const;
  // Called whenever a workspace stops being busy (the runner then starts waiting jobs).
  void set_on_idle(std::function<void()> cb) { on_idle_ = std::move(cb); }

  // After a job: what it changed against the prepared tree (null fields with a logged reason
  // when it cannot be computed, e.g. the workspace was never prepared).
  struct JobReport {
    std::optional<std::string> tree_hash;
    int64_t bundle_bytes = 0;
    std::optional<protocol::WorkspaceReportJson> fields;
  };
  // The scan runs with the job's memory limit (`memory_bytes`; 0: helper_memory_bytes).
  // `others_running`: another job of this workspace runs meanwhile (its writes could land during
  // the scan), so the scan neither answers from nor keeps a baseline (docs/workspaces.md).
  void scan(const std::string& caller, const std::string& key, int64_t memory_bytes, std::function<void(JobReport)> done,
            bool others_running = false);

  // The prepared tree of a workspace, for other kinds of jobs (a VM job builds its transfer
  // disk from it): nullopt if the workspace was never prepared.
  std::optional<PreparedTree> prepared(const std::string& caller, const std::string& key) const;
  // The mirror holding that tree's commit ("" if never prepared): a compile-cache fill reads it.
  std::string prepared_mirror(const std::string& caller, const std::string& key) const;
  // Why a job of an untrusted run may not use this workspace ("" when its contents passed the
  // change screen: docs/change-screen.md).
  std::string unscreened_reason(const std::string& caller, const std::string& key) const;
  // Lists the prepared tree's files (paths relative to the workspace, as git has them) from
  // the mirror, without reading the workspace a job may have changed. Async (git ls-tree).
  void list_prepared_files(const std::string& caller, const std::string& key,
                           std::function<void(Expected<std::vector<std::string>>)> done);

 private:
  struct Transfer;
  // The last full scan's report with a filesystem stamp taken before its git started: the next
  // scan answers with it when no inode of the workspace changed since (stat_walk.hpp), entering
  // no directory git reported ignored as a whole; or, once a walk found that, when the change feed
  // started before that walk heard of nothing (change_feed.hpp).
  struct ScanBaseline {
    FsStamp taken;
    std::set<std::string> skip;
    ChangeReport report;
    mutable std::shared_ptr<ChangeFeed> feed;  // set on the loop only; dropped with the baseline
  };
  struct Record {
    PreparedTree tree;
    std::string mirror;  // host path of the mirror holding tree.commit
    GitState git;        // the job-made .git's state after the last job (absent after a prepare)
    bool dirty = true;   // a job may have changed it since the last checkout (unknown: true)
    std::shared_ptr<const ScanBaseline> baseline;  // none after a checkout and at start
  };
  std::string mirror_path(const std::string& caller, const std::string& repository_root) const;
  std::string meta_dir(const std::string& caller, const std::string& key) const;
  std::string record_path(const std::string& caller, const std::string& key) const;
  Status save_record(const std::string& caller, const std::string& key, const Record& r);
  // Reads every record (start-up) and the keys whose checkout a dead runner left marked.
  void load_records(std::vector<std::pair<std::string, std::string>>& interrupted);
  Status mark_checkout(const std::string& caller, const std::string& key) const;
  // workspace.finish once the bundle's header checked out: its pack in, then the checkout.
  void ingest_bundle(const std::string& caller, std::shared_ptr<Transfer> transfer, std::string commit, std::string mirror,
                     std::shared_ptr<UniqueFd> bundle, Reply reply);
  // Puts the pack read from `pack` into the mirror (creating the mirror first if `create`),
  // verified, as the mirror account.
  void ingest_pack(const std::string& mirror, bool create, std::shared_ptr<UniqueFd> pack,
                   std::function<void(ChildResult)> done);
  // Mirror upkeep: an ingest holds its mirror (`go` waits while the mirror is collected); when
  // the last one releases it, maintain_mirror removes a mirror no record names, or collects one
  // that has too many packs or lost a workspace (drop).
  void use_mirror(const std::string& mirror, std::function<void()> go);
  void release_mirror(const std::string& mirror);
  void maintain_mirror(const std::string& mirror);
  size_t mirror_pack_count(const std::string& mirror) const;
  void remove_mirror_files(const std::string& path);
  // The refusal of a prepare while a job of the workspace runs or another prepare updates it.
  std::optional<Refusal> in_use_refusal(const std::string& caller, const std::string& key) const;
  // `reply`, then the mirror released (use_mirror): however a prepare that holds it ends.
  Reply releasing_mirror(const std::string& mirror, Reply reply);
  // A prepare of a tree another workspace of the caller's repository has: checked out to that
  // workspace's commit, no bundle. False: there is none (the reply is untouched).
  bool prepare_from_sibling(const std::string& caller, const protocol::WorkspaceParams& p, const std::string& mirror,
                            const std::string& transfer_id, Reply& reply);
  // A prepare without tree_hash (exec-remote/v1: base_commit): from the mirror, or snapshot_failed.
  void prepare_to_commit(const std::string& caller, const protocol::WorkspaceParams& p, std::string transfer_id,
                         Reply reply);
  // prepare_to_commit's part with the mirror held: the commit's tree, then the checkout.
  void find_commit_and_check_out(const std::string& caller, const protocol::WorkspaceParams& p, const std::string& mirror,
                                 std::string transfer_id, Reply reply);
  // Updates the workspace to next's commit in the sandbox; `then` gets the stored record.
  using Checked = std::function<void(std::optional<Refusal>, const Record*)>;
  void checkout(const std::string& caller, const std::string& key, Record next, Checked then);
  // Untrusted: screens the change from `base` in the mirror first; checks out only if it may execute.
  void screen_then_checkout(const std::string& caller, const std::string& key, Record next, std::string base, Checked then);
  Checked reply_when_checked(std::string transfer_id, Reply reply) const;
  void settle(const std::string& id_key);
  // The result of a prepare or finish: prepared, or refused (JSON).
  std::string final_reply(const std::string& transfer_id, const std::optional<Refusal>& refusal,
                          const Record* prepared) const;
  void expire_transfers();
  std::vector<std::string> git_env() const;
  // Starts motor-workspace-sandbox (spec.argv from sandbox_argv) in a helper cgroup of its own,
  // dying with the runner (--parent: PR_SET_PDEATHSIG).
  void run_helper(ChildSpec spec, int64_t memory_bytes, std::function<void(ChildResult)> done);
  // A checkout in progress is marked on disk (<meta>.checkout beside the record): a runner that
  // died during one finds the mark at start and drops the half-written workspace.
  std::string checkout_mark_path(const std::string& caller, const std::string& key) const;
  // The full scan: git status in the sandbox helper; `stamp` (taken before it) becomes the
  // workspace's baseline if it succeeds.
  void scan_with_git(const std::string& k, const std::string& caller, const std::string& key, int64_t memory_bytes,
                     std::optional<FsStamp> stamp, JobReport base, std::function<void(JobReport)> done);
  // The report of a scan, from the git scan's output or a baseline.
  void answer_scan(const std::string& k, const ChangeReport& report, JobReport base, std::function<void(JobReport)>& done);
  // Spares: <workspace root>/.warm-spares/<hash of caller and repository>/<published dir's name>/
  // target, owned by the job account (workspace_warm_spares.cpp).
  struct WarmSpare {
    bool wanted = false;  // made when the host is quiet next
    bool making = false;
    bool taken = false;   // a checkout holds it (its rename into the workspace is pending)
  };
  std::string spares_dir(const std::string& caller, const std::string& repository_root) const;
  // The ready spare of `warm`, claimed for one checkout (give it back with return_warm_spare), or
  // nullopt.
  std::optional<std::string> take_warm_spare(const std::string& caller, const std::string& repository_root,
                                             const WarmTarget& warm);
  // Moves a taken spare to <workspace>/target (never over anything there); false: it stays.
  bool place_warm_spare(const std::string& spare, const std::string& workspace);
  void return_warm_spare(const std::string& caller, const std::string& repository_root);
  void make_wanted_spares();
  void make_warm_spare(const std::string& caller, const std::string& repository_root);
  // Moves `dir` (a tree the job account owns) aside at once, empties it in the sandbox as that
  // account and removes it.
  Status discard_job_tree(const std::string& dir);
  // Empties <trash>/workspace and <trash>/meta as the job account, then removes the three.
  void empty_trash(const std::string& trash, std::function<void()> done);
  // `meta` ("": none) is bound at /meta, `warm` (a warm target; "": none) read-only at /warm.
  std::vector<std::string> sandbox_argv(const std::string& workspace, const std::string& meta,
                                        const std::string& mirror, const std::string& script,
                                        const std::string& warm = "") const;

  uv_loop_t* loop_;
  WorkspaceSettings s_;
  JobsRunning jobs_running_;
  std::function<void()> on_idle_;
  std::map<std::string, Record> records_;  // by "<caller>/<key>"
  std::map<std::string, std::unique_ptr<Transfer>> transfers_;
  std::map<std::string, int> busy_;        // "<caller>/<key>" -> operations in flight
  struct MirrorUse {
    int users = 0;            // ingests in flight
    bool collecting = false;  // git gc runs on it
    bool wanted = false;      // a workspace left it: collect when it is free
    std::vector<std::function<void()>> waiting;  // ingests waiting for the collection to end
  };
  std::map<std::string, MirrorUse> mirrors_;  // by host path
  reactor::UvHandle<uv_timer_t> expiry_;
  std::map<std::pair<std::string, std::string>, WarmSpare> spares_;  // by (caller, repository_root)
  reactor::UvHandle<uv_timer_t> spare_timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // async callbacks check it
};

}  // namespace motor::workspace
