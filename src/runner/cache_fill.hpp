// The compile-cache fills of each repository (docs/compile-cache.md): which verified tip a caller
// reported, whether its fill job runs, and the warm target it published. At most one fill per
// repository runs (later tips wait for its end: coalesced); a tip already published, or the one
// whose fill last failed, starts nothing. A fill builds in `fills/<hash>/tree/` (its /workspace,
// kept between fills so the next one is incremental) and leaves a copy of its target in
// `fills/<hash>/published.new`; the runner publishes that by renaming it to
// `targets/<hash>.<commit>` and replacing the symlink `targets/<hash>` (one rename each), with a
// record beside it, read again at start. Everything is under `<state_dir>/cache`.
#pragma once

#include "motor/simdjson_fwd.hpp"
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/json_writer.hpp"
#include "workspace/workspaces.hpp"

namespace motor::runner {

// exec.run's (ext) `fill_tip` {"branch", "commit"}: the default-branch tip the caller verified
// against its origin (client/fill_tip.hpp); exec-remote/v1 callers never send it.
struct FillTip {
  std::string branch;
  std::string commit;  // 40 or 64 lowercase hex digits
};
// Absent or null: nullopt; malformed: a bad_request naming the field.
Expected<std::optional<FillTip>> parse_fill_tip(simdjson::dom::parser& parser, std::string_view params_json);

enum class FillResult { kBuilding, kOk, kFailed };
std::string_view result_name(FillResult r);  // exec.status's last_rebuild_result

struct RepositoryFill {
  std::string caller, repository_root;
  std::optional<FillResult> last;  // null before any rebuild
  std::string building_job;        // the running fill's job id ("" = none)
  std::string building_commit;
  std::string building_source;     // the mirror's commit of the tree the fill builds
  std::string published_commit;    // "" = nothing published yet
  std::string published_source;    // the mirror's commit of its tree ("": an older record)
  int64_t published_at_ms = 0;
  std::string failed_commit;       // the tip whose fill failed last: not tried again
  int64_t last_used_ms = 0;        // a fill queued or ended, its target read (eviction's clock)
};

class CacheFills {
 public:
  explicit CacheFills(std::string cache_root) : root_(std::move(cache_root)) {}

  // Makes the directories (root-owned, 0700) and reads the published records back.
  Status open();

  bool wants(const std::string& caller, const std::string& repository_root, const std::string& commit) const;
  void started(const std::string& caller, const std::string& repository_root, const std::string& commit,
               const std::string& source_commit, const std::string& job_id);
  // The fill job ended. On success its copy of the target is published; an error says why not
  // (the fill then counts as failed). Returns the replaced target directory to remove, if any,
  // relative to the cache root.
  Expected<std::string> finished(const std::string& job_id, bool succeeded, int64_t now_ms);
  bool is_fill(const std::string& job_id) const;
  const RepositoryFill* of_job(const std::string& job_id) const;

  // The fill's /workspace, `fills/<hash>/tree` (its index and published.new are in `fills/<hash>`),
  // both made for `uid`:`gid` (0700) on first use.
  Expected<std::string> fill_dir(const std::string& caller, const std::string& repository_root, uid_t uid, gid_t gid) const;
  // The published warm target (a symlink to the newest), whether or not it exists.
  std::string target_link(const std::string& caller, const std::string& repository_root) const;
  // What a new workspace of the repository starts from: the directory the link names now and the
  // mirror commit of its tree; nullopt when nothing is published.
  std::optional<workspace::WarmTarget> warm_target(const std::string& caller, const std::string& repository_root) const;

  // exec.status's `repositories`: the caller's repositories with a fill tip.
  void write_repositories(protocol::JsonWriter& w, const std::string& caller, int64_t now_ms) const;

  // For eviction and `motor cache` (cache_sweep.cpp): every repository by name, its last use,
  // and forgetting what it built once its files are gone (exec.status: never built).
  std::string name_of(const std::string& caller, const std::string& repository_root) const;
  const std::string& root() const { return root_; }
  const std::map<std::string, RepositoryFill>& repositories() const { return repos_; }
  void mark_used(const std::string& name, int64_t now_ms);
  void forget_build(const std::string& name);

 private:
  Status publish(RepositoryFill& fill, int64_t now_ms, std::string& replaced);

  std::string root_;
  std::map<std::string, RepositoryFill> repos_;  // by name_of()
};

}  // namespace motor::runner
