// Spares of warm targets (docs/compile-cache.md "Spares made ahead"): the copy a new workspace
// starts from, made while the host is quiet, so the prepare that needs it takes it with one
// rename instead of copying the whole target on its path (226-524 ms for the test project's
// 114 MiB on ext4, which has no reflinks). One per repository, for the published target of the
// moment: its directory is named after the published directory, so a spare of a replaced target
// is never taken, and it is discarded when the target changes.
#include "workspace/workspaces.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cstring>

#include "base/log.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/slow_call.hpp"
#include "workspace/workspace_names.hpp"
#include "workspace/workspaces_internal.hpp"

namespace motor::workspace {

using namespace detail;

namespace {

// As the job account in the sandbox, /warm the published target read-only, /workspace the
// spare's directory: the copy lands under a temporary name and takes its final one only when
// whole, so a spare that exists is complete (also after a runner died during a copy). Idle CPU
// and I/O priority: a job that starts meanwhile goes first.
constexpr const char* kSpareScript = R"sh(set -u
rm -rf /workspace/target.making /workspace/target
nice -n 19 cp -R --reflink=auto --preserve=mode,timestamps /warm /workspace/target.making || exit 1
mv /workspace/target.making /workspace/target
)sh";

// A quiet host for this long before a spare is made.
constexpr uint64_t kQuietMs = 1000;

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool is_real_dir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string Workspaces::spares_dir(const std::string& caller, const std::string& repository_root) const {
  return s_.workspace_root + "/.warm-spares/" + path_hash(caller + '\n' + repository_root);
}

std::optional<std::string> Workspaces::take_warm_spare(const std::string& caller, const std::string& repository_root,
                                                       const WarmTarget& warm) {
  if (!s_.warm_spares) return std::nullopt;
  WarmSpare& spare = spares_[{caller, repository_root}];
  if (spare.making || spare.taken) return std::nullopt;
  const std::string path = spares_dir(caller, repository_root) + "/" + base_name(warm.dir) + "/target";
  if (!is_real_dir(path)) return std::nullopt;
  spare.taken = true;
  return path;
}

bool Workspaces::place_warm_spare(const std::string& spare, const std::string& workspace) {
  reactor::SlowCall timed("moving a warm spare into a workspace");
  // The workspace's own directory is the job account's: opened without following a link, and
  // nothing there (a tracked `target`, whatever it is) is ever replaced.
  UniqueFd ws(::open(workspace.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!ws) {
    log_warning("a warm spare: opening {}: {}", workspace, std::strerror(errno));
    return false;
  }
  if (::renameat2(AT_FDCWD, spare.c_str(), ws.get(), "target", RENAME_NOREPLACE) != 0) {
    log_warning("a warm spare: moving it into {}: {}", workspace, std::strerror(errno));
    return false;
  }
  return true;
}

void Workspaces::return_warm_spare(const std::string& caller, const std::string& repository_root) {
  if (auto it = spares_.find({caller, repository_root}); it != spares_.end()) it->second.taken = false;
}

void Workspaces::want_warm_spare(const std::string& caller, const std::string& repository_root) {
  if (!s_.warm_spares) return;
  spares_[{caller, repository_root}].wanted = true;
  poke_warm_spares();
}

void Workspaces::warm_target_changed(const std::string& caller, const std::string& repository_root) {
  if (!s_.warm_spares) return;
  // A copy in progress finds the change when it ends (make_warm_spare checks the name again).
  const std::string dir = spares_dir(caller, repository_root);
  WarmSpare& spare = spares_[{caller, repository_root}];
  if (is_real_dir(dir) && !spare.making && !spare.taken) {
    if (auto st = discard_job_tree(dir); !st) log_warning("a warm spare of {}: {}", repository_root, st.error().message);
  }
  want_warm_spare(caller, repository_root);
}

void Workspaces::poke_warm_spares() {
  if (!s_.warm_spares) return;
  bool any = false;
  for (const auto& [id, spare] : spares_) any = any || (spare.wanted && !spare.making);
  if (!any) return;
  if (!spare_timer_.live()) {
    if (int rc = spare_timer_.init(this, uv_timer_init, loop_); rc < 0) {
      return log_error("a warm spare's timer: {}", uv_strerror(rc));
    }
    uv_unref(spare_timer_.handle());
  }
  auto fire = [](uv_timer_t* h) {
    if (auto* self = reactor::owner_of<Workspaces>(h)) self->make_wanted_spares();
  };
  if (int rc = uv_timer_start(spare_timer_.get(), fire, kQuietMs, 0); rc < 0) {
    log_error("a warm spare's timer: {}", uv_strerror(rc));
  }
}

void Workspaces::make_wanted_spares() {
  // Quiet: no job runs or waits, no prepare is in flight; else the next job's end pokes again.
  if (!busy_.empty() || !s_.host_quiet || !s_.host_quiet()) return;
  for (auto& [id, spare] : spares_) {
    if (spare.making) return;  // one copy at a time
  }
  for (auto& [id, spare] : spares_) {
    if (spare.wanted && !spare.taken) return make_warm_spare(id.first, id.second);
  }
}

void Workspaces::make_warm_spare(const std::string& caller, const std::string& repository_root) {
  WarmSpare& spare = spares_[{caller, repository_root}];
  spare.wanted = false;
  const std::string dir = spares_dir(caller, repository_root);
  std::optional<WarmTarget> warm = s_.warm_target ? s_.warm_target(caller, repository_root) : std::nullopt;
  const std::string name = warm ? base_name(warm->dir) : "";
  // What is not the spare of the target published now goes (a replaced target's, a part copy).
  reactor::SlowCall timed("looking at a repository's warm spares");
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
      const std::string entry = e->d_name;
      if (entry != "." && entry != ".." && entry != name) stale.push_back(dir + "/" + entry);
    }
    ::closedir(d);
    for (const auto& path : stale) {
      if (auto st = discard_job_tree(path); !st) log_warning("a warm spare of {}: {}", repository_root, st.error().message);
    }
  }
  if (!warm) return;
  const std::string own = dir + "/" + name;
  if (is_real_dir(own + "/target")) return make_wanted_spares();  // ready (also one a runner before made)
  if (auto st = ensure_owned_dir(s_.workspace_root + "/.warm-spares", 0700, 0, 0); !st) {
    return log_error("a warm spare of {}: {}", repository_root, st.error().message);
  }
  if (auto st = ensure_owned_dir(dir, 0700, 0, 0); !st) return log_error("a warm spare of {}: {}", repository_root, st.error().message);
  if (auto st = ensure_owned_dir(own, 0700, s_.job_uid, s_.job_gid); !st) {
    return log_error("a warm spare of {}: {}", repository_root, st.error().message);
  }
  ChildSpec spec;
  spec.file = s_.sandbox_helper;
  spec.argv = sandbox_argv(own, "", "", kSpareScript, warm->dir);
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.timeout_ms = kCheckoutTimeoutMs;
  spare.making = true;
  const uint64_t started = uv_hrtime();
  run_helper(std::move(spec), 0, [this, alive = alive_, caller, repository_root, in_use = warm->in_use,
                                  started](ChildResult r) mutable {
    in_use.reset();  // the copy is over
    if (!*alive) return;
    WarmSpare& made = spares_[{caller, repository_root}];
    made.making = false;
    const auto ms = (uv_hrtime() - started) / 1000000;
    if (r.ok()) {
      log_info("a warm spare of {} made in {} ms", repository_root, ms);
    } else {
      log_warning("a warm spare of {} could not be made: {}", repository_root, r.describe());
    }
    if (s_.on_warm_spare) s_.on_warm_spare(r.ok() ? "made" : "failed");
    // The target may have changed meanwhile (warm_target_changed left the copy running): then
    // its directory has the old name and the next make discards it.
    if (made.wanted) poke_warm_spares();
  });
}

}  // namespace motor::workspace
