// The caller's check of a compile-cache fill tip (docs/compile-cache.md): a run reports its
// repository's default-branch tip for the runner to fill the shared caches from only when the
// local default branch's name and commit are what the configured origin advertises
// (`git ls-remote --symref <origin URL> HEAD`). The local default branch is the one
// `refs/remotes/origin/HEAD` names (else init.defaultBranch, else "main"), never the branch the
// origin claims: a local branch named after a forged origin HEAD does not authorize.
//
// A success is kept at most 24 h in a file of the caller's cache, keyed by repository, origin URL,
// branch and commit: a new local tip or URL needs a new check, and moving refs alone never
// authorizes (the origin must agree). A failure (a mismatch, an unreachable origin) skips the fill,
// never the job, and suppresses repeat queries and warnings for the same key for 60 s, in memory
// only; it never authorizes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace motor::client {

// What a run request reports as `fill_tip` (docs/protocol.md).
struct FillTip {
  std::string branch;  // the default branch's name, e.g. "main"
  std::string commit;  // its commit, 40 hex digits
};

// What a check is keyed by: all of it read locally, without the network.
struct TipKey {
  std::string repository;  // the checkout's root
  std::string origin_url;  // remote.origin.url as configured
  std::string branch, commit;
  std::string text() const;  // one line per field: the stored file's body and the memory's key
};

inline constexpr int64_t kTipVerifiedMaxAgeS = 24 * 3600;
inline constexpr int64_t kTipFailureQuietS = 60;
// How long the origin gets to answer `git ls-remote`; past it the check fails like any failure.
inline constexpr int kOriginQueryTimeoutMs = 5000;

class FillTipVerifier {
 public:
  using Clock = std::function<int64_t()>;                // seconds since the epoch
  using Warn = std::function<void(const std::string&)>;  // one line, for a human
  // `store_dir`: where successes are kept (made on the first one); `now` and `warn` are
  // injectable for tests (default: the system clock, stderr).
  explicit FillTipVerifier(std::string store_dir, Clock now = {}, Warn warn = {});

  // The verified tip of the checkout at `repository_root`, or nullopt (no fill: the job runs as
  // it would without one).
  std::optional<FillTip> verify(const std::string& repository_root);
  // The same for a local tip already read (`local_tip`): no local git process again.
  std::optional<FillTip> verify(const TipKey& key);

  int origin_queries() const { return origin_queries_; }  // ls-remote calls made (tests)

 private:
  bool stored_success(const TipKey& key, int64_t now) const;
  void store_success(const TipKey& key, int64_t now);
  std::optional<std::string> query_origin(const TipKey& key);  // nullopt: agrees; else why not
  void fail(const TipKey& key, int64_t now, const std::string& why);

  std::string store_dir_;
  Clock now_;
  Warn warn_;
  std::map<std::string, int64_t> quiet_until_;  // TipKey::text() -> end of its 60 s
  int origin_queries_ = 0;
};

// The local half: the default branch, its commit and the origin URL; nullopt when the checkout
// has no origin or no such branch (nothing to verify).
std::optional<TipKey> local_tip(const std::string& repository_root);

// The tree of `commit` in the checkout ("" if git cannot say).
std::string commit_tree(const std::string& repository_root, const std::string& commit);

// The caller's store of successes: $XDG_CACHE_HOME/motor/fill-tips.
std::string fill_tip_store_dir();

}  // namespace motor::client
