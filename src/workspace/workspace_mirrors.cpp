// Mirror upkeep: the per-repository mirrors are held while packs go in, collected when they
// have too many packs or lost a workspace, and removed once no workspace is prepared from them.
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

}  // namespace

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
