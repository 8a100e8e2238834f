// Workspaces: start-up, the sandbox helper runs, listing and dropping workspaces. The other
// concerns have files of their own: workspace_transfer.cpp (prepare, upload, finish),
// workspace_checkout.cpp, workspace_scan.cpp, workspace_mirrors.cpp, workspace_records.cpp,
// workspace_warm_spares.cpp.
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

namespace motor::workspace {

using namespace detail;

namespace {

// Empties a dropped workspace (moved aside) and the runner's git dir for it, as the job
// account in the sandbox: never as root over what a job wrote. Neither follows symlinks.
constexpr const char* kDropScript = R"sh(chmod -R u+rwX /workspace /meta 2>/dev/null
find /workspace /meta -mindepth 1 -delete
)sh";

}  // namespace

Workspaces::Workspaces(uv_loop_t* loop, WorkspaceSettings settings, JobsRunning jobs_running)
    : loop_(loop), s_(std::move(settings)), jobs_running_(std::move(jobs_running)) {}

Workspaces::~Workspaces() {
  *alive_ = false;
  for (auto& [id, t] : transfers_) unlink(t->path.c_str());
}

std::string Workspaces::mirror_path(const std::string& caller, const std::string& repository_root) const {
  return s_.state_dir + "/mirrors/" + caller + "/" + path_hash(repository_root) + ".git";
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
  std::vector<std::pair<std::string, std::string>> interrupted;  // checkouts a dead runner left half-done
  load_records(interrupted);
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
                                                  const std::string& mirror, const std::string& script,
                                                  const std::string& warm) const {
  std::vector<std::string> argv = {s_.sandbox_helper, "--uid", std::to_string(s_.job_uid), "--gid",
                                   std::to_string(s_.job_gid), "--init", s_.init_path,
                                   "--workspace", workspace + ":/workspace"};
  if (!meta.empty()) {
    argv.push_back("--rw");
    argv.push_back(meta + ":/meta");
  }
  if (!mirror.empty()) {
    argv.push_back("--ro");
    argv.push_back(mirror + ":/mirror");
  }
  if (!warm.empty()) {
    argv.push_back("--ro");
    argv.push_back(warm + ":/warm");
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

std::string Workspaces::prepared_mirror(const std::string& caller, const std::string& key) const {
  auto it = records_.find(id_key(caller, key));
  return it == records_.end() ? std::string() : it->second.mirror;
}

std::string Workspaces::unscreened_reason(const std::string& caller, const std::string& key) const {
  auto it = records_.find(id_key(caller, key));
  if (it == records_.end()) return "the workspace was never prepared, so its change was not screened (prepare it with --untrusted)";
  if (it->second.tree.screened_base.empty()) {
    return "the workspace was not prepared as untrusted, so its change was not screened (prepare it with --untrusted)";
  }
  return "";
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
  if (existed && rename(dir.c_str(), (trash + "/workspace").c_str()) < 0) return sys_error("moving " + dir);
  if (existed) forget_workspace_key(s_.workspace_root, caller, key);
  if (meta_existed && rename(meta.c_str(), (trash + "/meta").c_str()) < 0) return sys_error("moving " + meta);
  empty_trash(trash, [done = std::move(done)] { done(true); });
  return {};
}

void Workspaces::empty_trash(const std::string& trash, std::function<void()> done) {
  const std::string trash_ws = trash + "/workspace", trash_meta = trash + "/meta";
  (void)ensure_owned_dir(trash_ws, 0700, s_.job_uid, s_.job_gid);  // kept if there
  (void)ensure_owned_dir(trash_meta, 0700, s_.job_uid, s_.job_gid);
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(trash_ws, trash_meta, "", kDropScript);
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.timeout_ms = kCheckoutTimeoutMs;
  run_helper(std::move(spec), 0, [alive = alive_, trash, trash_ws, trash_meta, done = std::move(done)](ChildResult) {
    if (!*alive) return;
    reactor::SlowCall timed_rm("removing an emptied workspace");
    rmdir(trash_ws.c_str());
    rmdir(trash_meta.c_str());
    rmdir(trash.c_str());
    done();
  });
}

Status Workspaces::discard_job_tree(const std::string& dir) {
  static uint64_t counter = 0;
  const std::string trash = fmt::format("{}/workspace-trash/{}-spare-{}", s_.state_dir, now_ms(), ++counter);
  if (mkdir(trash.c_str(), 0700) < 0) return sys_error("creating " + trash);
  if (rename(dir.c_str(), (trash + "/workspace").c_str()) < 0) {
    Status st = sys_error("moving " + dir);
    rmdir(trash.c_str());
    return st;
  }
  empty_trash(trash, [] {});
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

}  // namespace motor::workspace
