#include "workspace/workspaces.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "base/log.hpp"
#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/git_bundle.hpp"
#include "protocol/json_writer.hpp"
#include "reactor/slow_call.hpp"
#include "workspace/change_screen.hpp"
#include "workspace/child_process.hpp"
#include "workspace/workspace_dir.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::workspace {
namespace {

// Raw bundle bytes per workspace.upload: base64 of this is ~683 KiB, well inside a 1 MiB frame.
constexpr size_t kChunkBytes = 512 * 1024;
constexpr uint64_t kMirrorTimeoutMs = 600000;
constexpr uint64_t kCheckoutTimeoutMs = 900000;
constexpr uint64_t kScanTimeoutMs = 300000;
// Ref the client's bundle carries (docs/protocol.md "Workspaces").
constexpr const char* kBundleRef = "refs/motor/synthetic";

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
// Every process here costs ~10-20 ms on a loaded host, so the common path runs two gits.
constexpr const char* kCheckoutScript = R"sh(set -u
commit=$1 tree=$2 mode=$3
export GIT_DIR=/meta/git GIT_WORK_TREE=/workspace GIT_INDEX_FILE=/meta/index
if [ ! -f /meta/git/HEAD ]; then
  env -u GIT_DIR -u GIT_WORK_TREE -u GIT_INDEX_FILE git init -q --bare /meta/git || exit 12
  git config core.bare false || exit 12
  mode=full
fi
echo /mirror/objects > /meta/git/objects/info/alternates || exit 12
got=$(git rev-parse -q --verify "$commit^{tree}") || { echo "the mirror has no commit $commit" >&2; exit 13; }
[ "$got" = "$tree" ] || { echo "the commit's tree is $got" >&2; exit 11; }
if [ -e /workspace/.git ] || [ -L /workspace/.git ]; then rm -rf /workspace/.git || exit 12; fi
if [ "$mode" != clean ] || ! git read-tree -m -u HEAD "$commit" 2>/dev/null; then
  # git would open (and block on) a FIFO or device named like one of its own files; the checkout
  # replaces the tree anyway.
  find /workspace \( -name .gitignore -o -name .gitattributes -o -name .gitmodules -o -name .mailmap \) \
    \( -type p -o -type s -o -type b -o -type c \) -delete 2>/dev/null
  git update-index -q --refresh >/dev/null 2>&1
  git read-tree --reset -u "$commit" || exit 12
  git clean -ffdq || exit 12
fi
echo "$commit" > /meta/git/HEAD || exit 12
)sh";

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

// A mirror gets one pack per prepare; past this many it is repacked (git gc).
constexpr size_t kMirrorMaxPacks = 16;

// Garbage-collects a mirror as the mirror account: its refs become exactly the commits the
// runner's records name (the workspaces prepared from it), then git gc repacks what they reach
// and prunes the rest (dropped workspaces, older prepares, packs a refused bundle left). The
// runner starts no ingest into the mirror while this runs, so nothing arriving can be pruned.
constexpr const char* kMirrorGcScript = R"sh(set -u
m=$1; shift
git --git-dir="$m" for-each-ref --format='delete %(refname)' refs/motor/ | git --git-dir="$m" update-ref --stdin || exit 12
for c do echo "create refs/motor/keep/$c $c"; done | git --git-dir="$m" update-ref --stdin || exit 12
exec git --git-dir="$m" gc --quiet --prune=now
)sh";

// Empties a dropped workspace (moved aside) and the runner's git dir for it, as the job
// account in the sandbox: never as root over what a job wrote. Neither follows symlinks.
constexpr const char* kDropScript = R"sh(chmod -R u+rwX /workspace /meta 2>/dev/null
find /workspace /meta -mindepth 1 -delete
)sh";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string id_key(const std::string& caller, const std::string& key) { return caller + "/" + key; }

// FNV-1a: a stable directory name for a repository root (collisions only ever mix objects of
// one caller's own repositories, which git keeps apart by hash anyway).
std::string path_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

Status ensure_owned_dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  if (mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sys_error("creating " + path);
  struct stat st {};
  if (lstat(path.c_str(), &st) < 0) return sys_error("checking " + path);
  if (!S_ISDIR(st.st_mode)) return make_error("workspace_setup_failed", path + " is not a directory");
  if ((st.st_uid != uid || st.st_gid != gid) && chown(path.c_str(), uid, gid) < 0) return sys_error("chown " + path);
  if ((st.st_mode & 07777) != mode && chmod(path.c_str(), mode) < 0) return sys_error("chmod " + path);
  return {};
}

std::string refusal_json(const std::string& reason) {
  protocol::JsonWriter w;
  protocol::Outcome o;
  o.kind = protocol::Outcome::Kind::kRefusedBeforeStart;
  o.reason = reason;
  protocol::write_outcome(w, o);
  return w.take();
}

}  // namespace

struct Workspaces::Transfer {
  std::string id, caller, key, repository_root, tree;
  std::string screen_base;  // untrusted: the change is screened from this commit before the checkout
  uint64_t session = 0;
  std::string path;  // the bundle as uploaded so far
  UniqueFd fd;
  int64_t received = 0;
  uint64_t last_activity_ms = 0;
};

Workspaces::Workspaces(uv_loop_t* loop, WorkspaceSettings settings, JobsRunning jobs_running)
    : loop_(loop), s_(std::move(settings)), jobs_running_(std::move(jobs_running)) {}

Workspaces::~Workspaces() {
  *alive_ = false;
  for (auto& [id, t] : transfers_) unlink(t->path.c_str());
}

std::string Workspaces::mirror_path(const std::string& caller, const std::string& repository_root) const {
  return s_.state_dir + "/mirrors/" + caller + "/" + path_hash(repository_root) + ".git";
}
std::string Workspaces::meta_dir(const std::string& caller, const std::string& key) const {
  return s_.state_dir + "/workspace-git/" + caller + "/" + key;
}
std::string Workspaces::record_path(const std::string& caller, const std::string& key) const {
  return s_.state_dir + "/workspace-git/" + caller + "/" + key + ".record";
}

std::string Workspaces::checkout_mark_path(const std::string& caller, const std::string& key) const {
  return s_.state_dir + "/workspace-git/" + caller + "/" + key + ".checkout";
}

void Workspaces::run_helper(ChildSpec spec, int64_t memory_bytes, std::function<void(ChildResult)> done) {
  std::vector<std::string> extra = {"--parent", std::to_string(getpid())};
  std::vector<std::string> dirs;
  if (s_.helper_cgroup) {
    auto cg = s_.helper_cgroup(memory_bytes > 0 ? memory_bytes : s_.helper_memory_bytes);
    if (!cg) return done(ChildResult{{}, "its cgroup: " + cg.error().message});
    dirs = std::move(*cg);
    for (const auto& d : dirs) {
      extra.push_back("--cgroup");
      extra.push_back(d);
    }
  }
  spec.argv.insert(spec.argv.begin() + 1, extra.begin(), extra.end());
  run_child(loop_, std::move(spec), [alive = alive_, release = s_.release_helper_cgroup, dirs = std::move(dirs),
                                     done = std::move(done)](ChildResult r) mutable {
    if (*alive && release && !dirs.empty()) release(std::move(dirs));
    done(std::move(r));
  });
}

Status Workspaces::start() {
  // Mirrors and uploads belong to the mirror account and are out of every job's reach; the
  // runner's per-workspace git dirs sit below a root-only directory.
  if (auto st = ensure_owned_dir(s_.state_dir + "/mirrors", 0700, s_.mirror_uid, s_.mirror_gid); !st) return st;
  if (auto st = ensure_owned_dir(s_.state_dir + "/transfers", 0700, s_.mirror_uid, s_.mirror_gid); !st) return st;
  if (auto st = ensure_owned_dir(s_.state_dir + "/workspace-git", 0700, 0, 0); !st) return st;
  if (auto st = ensure_owned_dir(s_.state_dir + "/workspace-trash", 0700, 0, 0); !st) return st;
  // Uploads of a runner that stopped are incomplete by definition.
  if (DIR* d = opendir((s_.state_dir + "/transfers").c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
  }
  // Workspaces of the layout before opaque names (<root>/<caller>/<key>, which every job saw in
  // its mountinfo) move to theirs before anything reads them.
  std::vector<std::string> problems;
  auto moved = migrate_legacy_workspace_dirs(s_.workspace_root, problems);
  if (!moved) return moved.error();
  if (*moved > 0) std::fprintf(stderr, "motor-runner: %d workspaces moved to opaque directory names\n", *moved);
  for (const auto& p : problems) std::fprintf(stderr, "motor-runner: workspace migration: %s\n", p.c_str());
  // Records of prepared workspaces: <state>/workspace-git/<caller>/<key>.record.
  const std::string base = s_.state_dir + "/workspace-git";
  std::vector<std::pair<std::string, std::string>> interrupted;  // checkouts a dead runner left half-done
  if (DIR* callers = opendir(base.c_str())) {
    while (dirent* c = readdir(callers)) {
      const std::string caller = c->d_name;
      if (caller[0] == '.') continue;
      DIR* keys = opendir((base + "/" + caller).c_str());
      if (!keys) continue;
      while (dirent* k = readdir(keys)) {
        std::string name = k->d_name;
        if (name.ends_with(".checkout") && validate_workspace_key(name.substr(0, name.size() - 9))) {
          interrupted.emplace_back(caller, name.substr(0, name.size() - 9));
          continue;
        }
        if (!name.ends_with(".record")) continue;
        const std::string key = name.substr(0, name.size() - 7);
        if (!validate_workspace_key(key)) continue;
        std::ifstream in(base + "/" + caller + "/" + name);
        Record r;
        std::string line;
        while (std::getline(in, line)) {
          const auto eq = line.find('=');
          if (eq == std::string::npos) continue;
          const std::string k2 = line.substr(0, eq), v = line.substr(eq + 1);
          if (k2 == "repository_root") r.tree.repository_root = v;
          else if (k2 == "commit") r.tree.commit = v;
          else if (k2 == "tree") r.tree.tree = v;
          else if (k2 == "bundle_bytes") r.tree.bundle_bytes = std::atoll(v.c_str());
          else if (k2 == "prepared_at_ms") r.tree.prepared_at_ms = std::atoll(v.c_str());
          else if (k2 == "screened_base" && protocol::is_object_id(v)) r.tree.screened_base = v;
          else if (k2 == "git_present") r.git.present = v == "1";
          else if (k2 == "git_head" && !v.empty()) r.git.head = v;
          else if (k2 == "git_ref" && !v.empty()) r.git.ref = v;
          else if (k2 == "git_index_tree" && !v.empty()) r.git.index_tree = v;
          else if (k2 == "git_stash_count") r.git.stash_count = std::atoll(v.c_str());
        }
        if (!protocol::is_object_id(r.tree.commit) || !protocol::is_object_id(r.tree.tree)) continue;
        r.mirror = mirror_path(caller, r.tree.repository_root);
        auto dir = workspace_dir_path(s_.workspace_root, caller, key);
        if (!dir) continue;
        r.tree.workspace_dir = *dir;
        records_[id_key(caller, key)] = std::move(r);
      }
      closedir(keys);
    }
    closedir(callers);
  }
  // A checkout the previous runner did not finish left the workspace part-way: it is dropped
  // (moved aside at once, emptied in the sandbox), so no job ever sees a half-written tree; the
  // next prepare checks it out in full.
  for (const auto& [caller, key] : interrupted) {
    log_warning("workspace {}/{}: a checkout was interrupted by the runner's stop; dropping it", caller, key);
    records_.erase(id_key(caller, key));
    if (auto st = drop(caller, key, [](bool) {}); !st) {
      log_error("workspace {}/{}: {}", caller, key, st.error().message);
      continue;
    }
    unlink(checkout_mark_path(caller, key).c_str());
  }
  // Mirrors no record names (their last workspace was dropped, maybe just before a crash) and
  // mirrors moved aside for removal are removed.
  if (DIR* callers = opendir((s_.state_dir + "/mirrors").c_str())) {
    std::vector<std::string> unused;
    while (dirent* c = readdir(callers)) {
      if (c->d_name[0] == '.') continue;
      const std::string dir = s_.state_dir + "/mirrors/" + c->d_name;
      DIR* list = opendir(dir.c_str());
      if (!list) continue;
      while (dirent* m = readdir(list)) {
        const std::string name = m->d_name;
        if (name == "." || name == "..") continue;
        unused.push_back(dir + "/" + name);
      }
      closedir(list);
    }
    closedir(callers);
    for (const auto& path : unused) {
      if (path.substr(path.rfind('/') + 1).starts_with(".trash-")) remove_mirror_files(path);
      else maintain_mirror(path);
    }
  }
  if (int rc = uv_timer_init(loop_, expiry_.get()); rc < 0) return make_error("internal", std::string("uv_timer_init: ") + uv_strerror(rc));
  expiry_.initialized(this);
  auto expire = [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<Workspaces>(h)) self->expire_transfers();
  };
  if (int rc = uv_timer_start(expiry_.get(), expire, 10000, 10000); rc < 0)
    return make_error("internal", std::string("uv_timer_start: ") + uv_strerror(rc));
  uv_unref(expiry_.handle());
  return {};
}

Status Workspaces::save_record(const std::string& caller, const std::string& key, const Record& r) {
  reactor::SlowCall timed("writing a workspace record");
  if (auto st = ensure_owned_dir(s_.state_dir + "/workspace-git/" + caller, 0700, 0, 0); !st) return st;
  std::ostringstream out;
  {
    out << "repository_root=" << r.tree.repository_root << "\ncommit=" << r.tree.commit << "\ntree=" << r.tree.tree
        << "\nbundle_bytes=" << r.tree.bundle_bytes << "\nprepared_at_ms=" << r.tree.prepared_at_ms << "\n";
    if (!r.tree.screened_base.empty()) out << "screened_base=" << r.tree.screened_base << "\n";
    // The .git a job left (git_state_changed of the next job compares with it), so a restart
    // does not forget it. Its values are single lines (the scan's output is split on '\n').
    out << "git_present=" << (r.git.present ? 1 : 0) << "\ngit_head=" << r.git.head.value_or("")
        << "\ngit_ref=" << r.git.ref.value_or("") << "\ngit_index_tree=" << r.git.index_tree.value_or("")
        << "\ngit_stash_count=" << r.git.stash_count << "\n";
  }
  // Whole and durable (base/atomic_file.hpp): a record lost in a crash would cost one full
  // bundle on the next prepare and a git_state_changed reported against "absent".
  return write_file_atomically(record_path(caller, key), out.str(), 0600);
}

std::vector<std::string> Workspaces::git_env() const {
  // Nothing of the runner's environment; git's system and global config ignored; these
  // command-line-level settings override any repository config (and what it includes).
  static const std::pair<const char*, const char*> kOverrides[] = {
      {"core.hooksPath", "/dev/null"}, {"core.fsmonitor", "false"},   {"core.untrackedCache", "false"},
      {"core.splitIndex", "false"},    {"core.symlinks", "true"},     {"core.autocrlf", "false"},
      {"core.sshCommand", "false"},    {"core.pager", "cat"},         {"core.askPass", "false"},
      {"credential.helper", ""},       {"diff.external", ""},         {"protocol.allow", "never"},
      {"protocol.file.allow", "always"}, {"gc.auto", "0"},            {"gc.autoDetach", "false"},
      {"maintenance.auto", "false"},   {"fetch.fsckObjects", "true"}, {"transfer.fsckObjects", "true"},
      {"safe.directory", "*"},         {"advice.detachedHead", "false"}, {"init.defaultBranch", "motor"},
  };
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1",
                                  "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_NO_REPLACE_OBJECTS=1",
                                  "GIT_ATTR_NOSYSTEM=1"};
  size_t i = 0;
  for (const auto& [k, v] : kOverrides) {
    env.push_back(fmt::format("GIT_CONFIG_KEY_{}={}", i, k));
    env.push_back(fmt::format("GIT_CONFIG_VALUE_{}={}", i, v));
    ++i;
  }
  env.push_back(fmt::format("GIT_CONFIG_COUNT={}", i));
  return env;
}

std::vector<std::string> Workspaces::sandbox_argv(const std::string& workspace, const std::string& meta,
                                                  const std::string& mirror, const std::string& script) const {
  std::vector<std::string> argv = {s_.sandbox_helper, "--uid", std::to_string(s_.job_uid), "--gid",
                                   std::to_string(s_.job_gid), "--init", s_.init_path,
                                   "--workspace", workspace + ":/workspace", "--rw", meta + ":/meta"};
  if (!mirror.empty()) {
    argv.push_back("--ro");
    argv.push_back(mirror + ":/mirror");
  }
  for (const char* a : {"--cwd", "/", "--", "/bin/sh", "-c"}) argv.emplace_back(a);
  argv.push_back(script);
  argv.emplace_back("motor-workspace");
  return argv;
}

bool Workspaces::busy(const std::string& caller, const std::string& key) const {
  return busy_.count(id_key(caller, key)) > 0;
}

void Workspaces::settle(const std::string& k) {
  if (auto it = busy_.find(k); it != busy_.end() && --it->second <= 0) busy_.erase(it);
  if (on_idle_) on_idle_();
}

std::optional<PreparedTree> Workspaces::prepared(const std::string& caller, const std::string& key) const {
  auto it = records_.find(id_key(caller, key));
  if (it == records_.end()) return std::nullopt;
  return it->second.tree;
}

std::string Workspaces::unscreened_reason(const std::string& caller, const std::string& key) const {
  auto it = records_.find(id_key(caller, key));
  if (it == records_.end()) return "the workspace was never prepared, so its change was not screened (prepare it with --untrusted)";
  if (it->second.tree.screened_base.empty()) {
    return "the workspace was not prepared as untrusted, so its change was not screened (prepare it with --untrusted)";
  }
  return "";
}

std::string Workspaces::final_reply(const std::string& transfer_id,
                                    const std::optional<Refusal>& refusal, const Record* prepared) const {
  protocol::JsonWriter w;
  w.begin_object();
  if (transfer_id.empty()) w.field_null("transfer_id");
  else w.field("transfer_id", transfer_id);
  if (refusal) {
    w.field_raw("outcome", refusal_json(refusal->reason));
    w.field("refusal_detail", refusal->detail.substr(0, 1024)).field("retry_after_ms", refusal->retry_after_ms);
  } else {
    w.key("outcome").begin_object().field("type", "prepared").end_object();
    w.field_null("refusal_detail").field_null("retry_after_ms");
  }
  if (prepared) {
    w.field("tree_hash", prepared->tree.tree).field("commit", prepared->tree.commit);
    w.field("bundle_bytes", prepared->tree.bundle_bytes);
    w.field("fetch_ms", prepared->tree.fetch_ms).field("checkout_ms", prepared->tree.checkout_ms);
  }
  w.end_object();
  return w.take();
}

void Workspaces::prepare(uint64_t session, const std::string& caller,
                         const protocol::WorkspaceParams& p, std::string transfer_id,
                         const std::optional<Refusal>& refusal, Reply reply) {
  auto refuse = [&](std::string reason, std::string detail) {
    reply(final_reply("", Refusal{std::move(reason), std::move(detail), std::nullopt}, nullptr));
  };
  if (auto st = validate_workspace_key(p.workspace_key); !st) return refuse("workspace_key_rejected", st.error().message);
  for (const auto& sibling : p.siblings) {
    if (auto st = validate_workspace_key(sibling); !st) return refuse("workspace_key_rejected", st.error().message);
  }
  if (refusal) return reply(final_reply("", refusal, nullptr));
  if (p.untrusted && p.screen_base.empty()) {
    return refuse("screen_refused", "an untrusted prepare names the commit its change is screened from (screen_base)");
  }
  if (p.tree_hash.empty() || p.repository_root.empty() || p.repository_root[0] != '/') {
    return reply(make_error("bad_request",
                                        "workspace.prepare needs tree_hash and an absolute repository_root"));
  }
  const std::string k = id_key(caller, p.workspace_key);
  const std::string mirror = mirror_path(caller, p.repository_root);
  // The tree is in the mirror already (the same tree as last time: only the job's changes are
  // undone): no bundle.
  // An untrusted prepare takes this way only if the tree passed the screen from the same base.
  if (auto it = records_.find(k); it != records_.end() && it->second.tree.tree == p.tree_hash && it->second.mirror == mirror &&
                                  (!p.untrusted || it->second.tree.screened_base == p.screen_base)) {
    if (busy(caller, p.workspace_key) || jobs_running_(caller, p.workspace_key)) {
      return refuse("workspace_setup_failed", "a job or another prepare is using this workspace; try again when it ends");
    }
    // Untouched since its checkout (the scan after each job found no change and no .git): the
    // checkout would change nothing. An unchanged checkout's `motor run` costs no helper then.
    if (!it->second.dirty) {
      it->second.tree.bundle_bytes = 0;
      it->second.tree.fetch_ms = it->second.tree.checkout_ms = 0;
      return reply(final_reply("", std::nullopt, &it->second));
    }
    Record next = it->second;
    next.tree.bundle_bytes = 0;
    next.tree.fetch_ms = 0;
    ++busy_[k];
    return checkout(caller, p.workspace_key, std::move(next), reply_when_checked("", std::move(reply)));
  }
  auto t = std::make_unique<Transfer>();
  t->id = std::move(transfer_id);
  t->caller = caller;
  t->key = p.workspace_key;
  t->repository_root = p.repository_root;
  t->tree = p.tree_hash;
  if (p.untrusted) t->screen_base = p.screen_base;
  t->session = session;
  t->path = s_.state_dir + "/transfers/" + t->id + ".bundle";
  t->last_activity_ms = uv_now(loop_);
  {
    reactor::SlowCall timed("creating a bundle upload");
    t->fd = UniqueFd(::open(t->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!t->fd || fchown(t->fd.get(), s_.mirror_uid, s_.mirror_gid) < 0) {
      return refuse("workspace_setup_failed", fmt::format("cannot store the upload: {}", std::strerror(errno)));
    }
  }
  // What the runner has, so the client bundles only what is missing: the commits this caller's
  // workspaces of the same repository were prepared to.
  protocol::JsonWriter w;
  w.begin_object().field("transfer_id", t->id).field_null("outcome").key("have").begin_array();
  if (auto own = records_.find(k); own != records_.end() && own->second.mirror == mirror) w.string(own->second.tree.commit);
  for (const auto& [rk, r] : records_) {
    if (rk != k && rk.starts_with(caller + "/") && r.mirror == mirror) w.string(r.tree.commit);
  }
  w.end_array().field("chunk_bytes", static_cast<uint64_t>(kChunkBytes)).field("max_bundle_bytes", s_.max_bundle_bytes);
  w.field("bundle_ref", kBundleRef).end_object();
  transfers_[t->id] = std::move(t);
  reply(w.take());
}

void Workspaces::upload(uint64_t session, const protocol::WorkspaceParams& p, Reply reply) {
  auto it = transfers_.find(p.transfer_id);
  // Another connection's transfer id is treated as unknown: it cannot be continued from here.
  if (it == transfers_.end() || it->second->session != session) {
    return reply(make_error("bad_request", "no such transfer on this connection (it ended or expired)"));
  }
  Transfer& t = *it->second;
  if (!p.offset || *p.offset != t.received) {
    return reply(make_error("bad_request",
                                        fmt::format("params.offset must be {} (the bytes received so far)", t.received)));
  }
  if (t.received + static_cast<int64_t>(p.data.size()) > s_.max_bundle_bytes) {
    const std::string tid = t.id;
    unlink(t.path.c_str());
    transfers_.erase(it);
    return reply(final_reply(tid,
                             Refusal{"bundle_rejected",
                                     fmt::format("the bundle is over this runner's limit of {} bytes (max_bundle_size); "
                                                 "nothing was changed",
                                                 s_.max_bundle_bytes),
                                     std::nullopt},
                             nullptr));
  }
  {
    reactor::SlowCall timed("writing a bundle chunk");
    size_t done = 0;
    while (done < p.data.size()) {
      const ssize_t n = ::write(t.fd.get(), p.data.data() + done, p.data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string tid = t.id;
        const int err = errno;
        unlink(t.path.c_str());
        transfers_.erase(it);
        const bool full = err == ENOSPC || err == EDQUOT;
        return reply(final_reply(tid,
                                 Refusal{full ? "runner_disk_full" : "workspace_setup_failed",
                                         fmt::format("storing the bundle: {}", std::strerror(err)),
                                         full ? std::optional<int64_t>(60000) : std::nullopt},
                                 nullptr));
      }
      done += static_cast<size_t>(n);
    }
  }
  t.received += static_cast<int64_t>(p.data.size());
  t.last_activity_ms = uv_now(loop_);
  reply(fmt::format(R"({{"transfer_id":"{}","received":{}}})", t.id, t.received));
}

void Workspaces::finish(uint64_t session, const std::string& caller, const protocol::WorkspaceParams& p,
                        Reply reply) {
  auto it = transfers_.find(p.transfer_id);
  if (it == transfers_.end() || it->second->session != session) {
    return reply(make_error("bad_request", "no such transfer on this connection (it ended or expired)"));
  }
  std::unique_ptr<Transfer> t = std::move(it->second);
  transfers_.erase(it);
  t->fd.reset();
  auto refuse = [&](std::string reason, std::string detail) {
    unlink(t->path.c_str());
    reply(final_reply(t->id, Refusal{std::move(reason), std::move(detail), std::nullopt}, nullptr));
  };
  if (!p.bundle_bytes || *p.bundle_bytes != t->received) {
    return refuse("transfer_interrupted", fmt::format("{} bundle bytes arrived, the client announced {}", t->received,
                                                      p.bundle_bytes.value_or(-1)));
  }
  if (p.commit.empty()) return refuse("bundle_rejected", "workspace.finish needs the bundle's commit");
  // The header is read here (a bounded read of the runner's own file): its one ref must be the
  // announced commit. The pack behind it goes to index-pack as that process's stdin.
  auto bundle = std::make_shared<UniqueFd>();
  std::string head(protocol::kMaxBundleHeaderBytes, '\0');
  {
    reactor::SlowCall timed("reading a bundle header");
    *bundle = UniqueFd(::open(t->path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    const ssize_t n = *bundle ? ::pread(bundle->get(), head.data(), head.size(), 0) : -1;
    if (n < 0) return refuse("workspace_setup_failed", fmt::format("reading the bundle: {}", std::strerror(errno)));
    head.resize(static_cast<size_t>(n));
  }
  auto header = protocol::parse_bundle_header(head);
  if (!header) return refuse("bundle_rejected", header.error().message);
  if (header->refs.size() != 1 || header->refs[0].name != kBundleRef) {
    return refuse("bundle_rejected", fmt::format("the bundle must hold exactly one ref, {}", kBundleRef));
  }
  if (header->refs[0].id != p.commit) {
    return refuse("bundle_rejected", fmt::format("the bundle holds commit {}, not the announced {}", header->refs[0].id, p.commit));
  }
  if (::lseek(bundle->get(), static_cast<off_t>(header->pack_offset), SEEK_SET) < 0) {
    return refuse("workspace_setup_failed", fmt::format("reading the bundle: {}", std::strerror(errno)));
  }
  if (busy(caller, t->key) || jobs_running_(caller, t->key)) {
    return refuse("workspace_setup_failed", "a job or another prepare is using this workspace; try again when it ends");
  }
  ++busy_[id_key(caller, t->key)];
  std::string commit = p.commit;
  const std::string mirror = mirror_path(caller, t->repository_root);
  {
    reactor::SlowCall timed("creating a mirror directory");
    if (auto st = ensure_owned_dir(s_.state_dir + "/mirrors/" + caller, 0700, s_.mirror_uid, s_.mirror_gid); !st) {
      settle(id_key(caller, t->key));
      return refuse("workspace_setup_failed", st.error().message);
    }
  }
  std::shared_ptr<Transfer> shared(std::move(t));
  // However the prepare ends, the mirror is free again once it has answered.
  reply = [this, alive = alive_, mirror, inner = std::move(reply)](Expected<std::string> result) {
    inner(std::move(result));
    if (*alive) release_mirror(mirror);
  };
  use_mirror(mirror, [this, alive = alive_, shared, commit, mirror, caller, bundle, reply = std::move(reply)]() mutable {
    struct stat mirror_head {};
    const bool mirror_exists = ::stat((mirror + "/HEAD").c_str(), &mirror_head) == 0;
    const uint64_t fetch_start = uv_hrtime();
    ingest_pack(mirror, !mirror_exists, bundle, [this, alive, shared, commit, mirror, caller, fetch_start,
                                                  reply = std::move(reply)](ChildResult r) mutable {
      if (!*alive) return;
      unlink(shared->path.c_str());
      const std::string k = id_key(caller, shared->key);
      if (!r.ok()) {
        settle(k);
        // index-pack dies (exit 128) on a corrupt pack, an object fsck rejects, or a link to an
        // object neither in the pack nor in the mirror (a missing prerequisite).
        const std::string reason = r.exit_code == 128 ? "bundle_rejected" : "workspace_setup_failed";
        return reply(final_reply(shared->id,
                                 Refusal{reason, "the workspace is unchanged; git: " + r.describe(), std::nullopt}, nullptr));
      }
      Record next;
      if (auto it2 = records_.find(k); it2 != records_.end()) next.git = it2->second.git;
      next.mirror = mirror;
      next.tree.repository_root = shared->repository_root;
      next.tree.commit = commit;
      next.tree.tree = shared->tree;
      next.tree.bundle_bytes = shared->received;
      next.tree.fetch_ms = static_cast<int64_t>((uv_hrtime() - fetch_start) / 1000000);
      if (shared->screen_base.empty()) {
        return checkout(caller, shared->key, std::move(next), reply_when_checked(shared->id, std::move(reply)));
      }
      screen_then_checkout(caller, shared->key, std::move(next), shared->screen_base,
                           reply_when_checked(shared->id, std::move(reply)));
    });
  });
}

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
      return then(make_error("screen_refused", r ? screen::summary_line(*r, 1024) : "DO NOT EXECUTE: " + r.error().message),
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
      return then(!ws ? ws.error() : meta.error(), nullptr);
    }
    workspace = *ws;
  }
  next.tree.workspace_dir = workspace;
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(workspace, meta_dir(caller, key), next.mirror, kCheckoutScript);
  spec.argv.push_back(next.tree.commit);
  spec.argv.push_back(next.tree.tree);
  // Clean only when this workspace was checked out by this runner and no job changed it since.
  auto current = records_.find(k);
  const bool clean = current != records_.end() && !current->second.dirty && current->second.mirror == next.mirror;
  spec.argv.push_back(clean ? "clean" : "full");
  spec.env = git_env();
  spec.timeout_ms = kCheckoutTimeoutMs;
  spec.max_stdout_bytes = 64 * 1024;
  // Marked before anything is touched, unmarked once the checkout ended either way (a failure
  // below removes the record itself): see checkout_mark_path.
  const std::string mark = checkout_mark_path(caller, key);
  {
    reactor::SlowCall timed("marking a checkout");
    UniqueFd m(::open(mark.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!m || fsync(m.get()) != 0) {
      const Error e = sys_error("marking the checkout at " + mark);
      settle(k);
      return then(e, nullptr);
    }
  }
  const uint64_t checkout_start = uv_hrtime();
  run_helper(std::move(spec), 0, [this, alive = alive_, caller, key, k, mark, next = std::move(next), checkout_start,
                                  then = std::move(then)](ChildResult r) mutable {
    if (!*alive) return;
    settle(k);
    unlink(mark.c_str());
    if (!r.ok() && (r.exit_code == 11 || r.exit_code == 13)) {
      // Checked before anything was touched: the workspace and its record are as they were.
      return then(make_error(r.exit_code == 11 ? "tree_hash_mismatch" : "bundle_rejected",
                             "the workspace is unchanged; " + r.describe()),
                  nullptr);
    }
    if (!r.ok()) {
      // The mirror has the tree; the workspace may be part-way: the next prepare redoes it.
      records_.erase(k);
      unlink(record_path(caller, key).c_str());
      return then(make_error("workspace_setup_failed", "updating the workspace failed: " + r.describe()), nullptr);
    }
    next.tree.prepared_at_ms = now_ms();
    next.tree.checkout_ms = static_cast<int64_t>((uv_hrtime() - checkout_start) / 1000000);
    next.git = GitState{};  // the checkout removed any .git a job made
    next.dirty = false;
    if (auto st = save_record(caller, key, next); !st) return then(st, nullptr);
    records_[k] = next;
    then({}, &records_[k]);
  });
}

Workspaces::Checked Workspaces::reply_when_checked(std::string transfer_id, Reply reply) const {
  return [this, transfer_id = std::move(transfer_id), reply = std::move(reply)](Status st, const Record* rec) {
    if (!st) {
      const std::string& code = st.error().code;
      const bool known = code == "tree_hash_mismatch" || code == "bundle_rejected" || code == "screen_refused";
      return reply(final_reply(transfer_id,
                               Refusal{known ? code : "workspace_setup_failed", st.error().message, std::nullopt}, nullptr));
    }
    reply(final_reply(transfer_id, std::nullopt, rec));
  };
}

void Workspaces::list(const std::string& caller, Reply reply) {
  protocol::JsonWriter w;
  w.begin_object().key("workspaces").begin_array();
  reactor::SlowCall timed("listing workspaces");
  for (const auto& key : noted_workspace_keys(s_.workspace_root, caller)) {
    struct stat st {};
    if (auto dir = workspace_dir_path(s_.workspace_root, caller, key); !dir || lstat(dir->c_str(), &st) != 0) continue;
    {
      w.begin_object().field("workspace_key", key);
      if (auto it = records_.find(id_key(caller, key)); it != records_.end()) {
        const auto& t = it->second.tree;
        w.field("repository_root", t.repository_root).field("tree_hash", t.tree).field("commit", t.commit);
        w.field("bundle_bytes", t.bundle_bytes).field("prepared_at_ms", t.prepared_at_ms);
      } else {
        w.field_null("repository_root").field_null("tree_hash");
      }
      w.field("busy", busy(caller, key)).end_object();
    }
  }
  w.end_array().end_object();
  reply(w.take());
}

Status Workspaces::drop(const std::string& caller, const std::string& key, std::function<void(bool)> done) {
  if (auto st = validate_workspace_key(key); !st) return st;
  const std::string k = id_key(caller, key);
  if (busy(caller, key)) return make_error("workspace_busy", "a prepare is updating this workspace; drop it once that ends");
  std::string mirror;
  if (auto it = records_.find(k); it != records_.end()) mirror = it->second.mirror;
  const bool had_record = records_.erase(k) > 0;
  if (!mirror.empty()) {
    // Its objects go with it: the mirror is collected (or removed, if no workspace is left).
    mirrors_[mirror].wanted = true;
    maintain_mirror(mirror);
  }
  unlink(record_path(caller, key).c_str());
  auto path = workspace_dir_path(s_.workspace_root, caller, key);
  if (!path) return path.error();
  const std::string& dir = *path;
  const std::string meta = meta_dir(caller, key);
  struct stat st {};
  const bool existed = lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  const bool meta_existed = lstat(meta.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (!existed) forget_workspace_key(s_.workspace_root, caller, key);
  if (!existed && !meta_existed) {
    done(had_record);
    return {};
  }
  // Moved aside at once (the key is free again now), emptied in the sandbox, then removed.
  static uint64_t counter = 0;
  const std::string trash = fmt::format("{}/workspace-trash/{}-{}", s_.state_dir, now_ms(), ++counter);
  reactor::SlowCall timed("moving a dropped workspace aside");
  if (mkdir(trash.c_str(), 0700) < 0) return sys_error("creating " + trash);
  const std::string trash_ws = trash + "/workspace", trash_meta = trash + "/meta";
  if (existed && rename(dir.c_str(), trash_ws.c_str()) < 0) return sys_error("moving " + dir);
  if (existed) forget_workspace_key(s_.workspace_root, caller, key);
  if (!existed) (void)ensure_owned_dir(trash_ws, 0700, s_.job_uid, s_.job_gid);
  if (meta_existed && rename(meta.c_str(), trash_meta.c_str()) < 0) return sys_error("moving " + meta);
  if (!meta_existed) (void)ensure_owned_dir(trash_meta, 0700, s_.job_uid, s_.job_gid);
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(trash_ws, trash_meta, "", kDropScript);
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.timeout_ms = kCheckoutTimeoutMs;
  run_helper(std::move(spec), 0, [alive = alive_, trash, trash_ws, trash_meta, done = std::move(done)](ChildResult r) {
    if (!*alive) return;
    reactor::SlowCall timed_rm("removing an emptied workspace");
    rmdir(trash_ws.c_str());
    rmdir(trash_meta.c_str());
    rmdir(trash.c_str());
    (void)r;
    done(true);
  });
  return {};
}

void Workspaces::session_closed(uint64_t session) {
  for (auto it = transfers_.begin(); it != transfers_.end();) {
    if (it->second->session == session) {
      unlink(it->second->path.c_str());
      it = transfers_.erase(it);
    } else {
      ++it;
    }
  }
}

void Workspaces::expire_transfers() {
  const uint64_t now = uv_now(loop_);
  for (auto it = transfers_.begin(); it != transfers_.end();) {
    if (now - it->second->last_activity_ms > s_.transfer_idle_ms) {
      unlink(it->second->path.c_str());
      it = transfers_.erase(it);
    } else {
      ++it;
    }
  }
}

void Workspaces::scan(const std::string& caller, const std::string& key, int64_t memory_bytes,
                      std::function<void(JobReport)> done) {
  const std::string k = id_key(caller, key);
  auto it = records_.find(k);
  if (it == records_.end()) return done(JobReport{});  // never prepared: nothing to compare with
  JobReport base;
  base.tree_hash = it->second.tree.tree;
  base.bundle_bytes = it->second.tree.bundle_bytes;
  ++busy_[k];
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(it->second.tree.workspace_dir, meta_dir(caller, key), it->second.mirror, kScanScript);
  // git opens every .gitignore/.gitattributes it meets: one that is a FIFO (or a device) would
  // block it for good. The helper covers such files with an empty one in its own mount namespace.
  if (!control_weakened("scan-masks")) spec.argv.insert(spec.argv.begin() + 1, "--mask-special-git-files");  // test build only
  spec.env = git_env();
  spec.timeout_ms = kScanTimeoutMs;
  run_helper(std::move(spec), memory_bytes, [this, alive = alive_, k, base, done = std::move(done)](ChildResult r) mutable {
    if (!*alive) return;
    settle(k);
    auto rec = records_.find(k);
    std::optional<ChangeReport> report;
    if (r.ok() && !r.stdout_truncated) {
      reactor::SlowCall timed("parsing a changed-paths scan");
      report = parse_scan_output(r.out);
    }
    if (!report || rec == records_.end()) {
      if (rec != records_.end()) rec->second.dirty = true;
      base.fields.reset();
      log_warning("workspace {}: the changed-paths scan failed: {}", k, r.describe());
      return done(std::move(base));
    }
    base.fields = encode_report(*report, rec->second.git);
    const bool git_moved = !(rec->second.git == report->git);
    rec->second.git = report->git;
    if (git_moved) {
      const auto slash = k.rfind('/');  // keys hold no '/'
      if (auto st = save_record(k.substr(0, slash), k.substr(slash + 1), rec->second); !st) {
        log_error("workspace {}: saving its .git state: {}", k, st.error().message);
      }
    }
    rec->second.dirty = !report->changes.empty() || report->git.present;
    done(std::move(base));
  });
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

void Workspaces::use_mirror(const std::string& mirror, std::function<void()> go) {
  MirrorUse& m = mirrors_[mirror];
  if (m.collecting) return m.waiting.push_back(std::move(go));
  ++m.users;
  go();
}

void Workspaces::release_mirror(const std::string& mirror) {
  auto it = mirrors_.find(mirror);
  if (it == mirrors_.end() || --it->second.users > 0) return;
  maintain_mirror(mirror);
}

size_t Workspaces::mirror_pack_count(const std::string& mirror) const {
  reactor::SlowCall timed("counting a mirror's packs");
  size_t packs = 0;
  if (DIR* d = opendir((mirror + "/objects/pack").c_str())) {
    while (dirent* e = readdir(d)) packs += std::string_view(e->d_name).ends_with(".pack");
    closedir(d);
  }
  return packs;
}

void Workspaces::maintain_mirror(const std::string& mirror) {
  MirrorUse& m = mirrors_[mirror];
  if (m.users > 0 || m.collecting) return;  // checked again when it is free
  std::vector<std::string> keep;
  for (const auto& [k, r] : records_) {
    if (r.mirror == mirror) keep.push_back(r.tree.commit);
  }
  if (keep.empty()) {
    // No workspace is prepared from it: moved aside at once (a new prepare of the repository
    // starts a fresh mirror), removed by the mirror account.
    mirrors_.erase(mirror);
    static uint64_t counter = 0;
    const std::string dir = mirror.substr(0, mirror.rfind('/'));
    const std::string trash = fmt::format("{}/.trash-{}-{}", dir, now_ms(), ++counter);
    reactor::SlowCall timed("moving an unused mirror aside");
    if (::rename(mirror.c_str(), trash.c_str()) == 0) remove_mirror_files(trash);
    return;
  }
  if (!m.wanted && mirror_pack_count(mirror) <= kMirrorMaxPacks) return;
  m.wanted = false;
  m.collecting = true;
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  ChildSpec spec;
  spec.file = "/bin/sh";
  spec.argv = {"/bin/sh", "-c", kMirrorGcScript, "motor-mirror-gc", mirror};
  spec.argv.insert(spec.argv.end(), keep.begin(), keep.end());
  spec.env = git_env();
  spec.uid = s_.mirror_uid;
  spec.gid = s_.mirror_gid;
  spec.timeout_ms = kMirrorTimeoutMs;
  spec.max_stdout_bytes = 64 * 1024;
  run_child(loop_, std::move(spec), [this, alive = alive_, mirror](ChildResult r) {
    if (!*alive) return;
    if (!r.ok()) log_warning("collecting the mirror {} failed: {}", mirror, r.describe());
    MirrorUse& use = mirrors_[mirror];
    use.collecting = false;
    // Prepares that waited for it go on now; all count as users before any starts.
    auto waiting = std::move(use.waiting);
    use.waiting.clear();
    use.users += static_cast<int>(waiting.size());
    for (auto& go : waiting) go();
  });
}

void Workspaces::remove_mirror_files(const std::string& path) {
  ChildSpec spec;
  spec.file = "/bin/rm";
  spec.argv = {"rm", "-rf", "--", path};
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.uid = s_.mirror_uid;
  spec.gid = s_.mirror_gid;
  spec.timeout_ms = kMirrorTimeoutMs;
  run_child(loop_, std::move(spec), [path](ChildResult r) {
    if (!r.ok()) log_warning("removing {} failed: {}", path, r.describe());
  });
}

}  // namespace motor::workspace
