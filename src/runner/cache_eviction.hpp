// Eviction of the compile cache's fill workspaces and published warm targets
// (docs/compile-cache.md, "Eviction, status and clear"): what a measurement found (a `du` child's
// output, parsed here), which of it goes (plan_evictions: pure), and the uses that keep a warm
// target from going while something reads it (TargetUses). The runner's side, which measures off
// the loop and moves what goes out of the way, is cache_sweep.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace motor::runner {

// One line of `du -s -B1 --time --time-style=+%s PATH...`: "BYTES\tMTIME\tPATH" (the newest
// modification time below PATH, in seconds).
struct MeasuredPath {
  std::string path;
  int64_t bytes = 0;
  int64_t mtime_s = 0;
};
// Lines that are not of that form are skipped (du reports a path that vanished on stderr).
std::vector<MeasuredPath> parse_du_output(std::string_view out);

enum class CacheItemKind { kFill, kTarget };
enum class EvictReason { kSize, kAge };
std::string_view reason_name(EvictReason reason);
// The wall clock in Unix milliseconds: last uses, publishing times and ages are on it.
int64_t unix_now_ms();

// A directory under the cache root that eviction may remove.
struct CacheItem {
  std::string path;           // relative to the cache root: fills/<name> or targets/<name>.<commit>
  std::string name;           // the repository's name (CacheFills::name_of)
  CacheItemKind kind = CacheItemKind::kFill;
  int64_t bytes = 0;
  int64_t last_used_ms = 0;   // the repository's last use; for a leftover, its newest mtime
  bool in_use = false;        // its fill is queued or running, or its target is being read
  bool newest_target = false; // the repository's published warm target (targets/<name> names it)
};

struct Eviction {
  CacheItem item;
  EvictReason reason = EvictReason::kAge;
};

struct CacheLimits {
  int64_t max_bytes = 0;  // 0: no size limit
  int64_t max_age_s = 0;  // 0: no age limit
};

// What goes, in order: every item not in use and unused for longer than max_age_s (a newest
// target too); then, while the rest together exceed max_bytes, the least recently used item that
// is neither in use nor a repository's newest target. Nothing in use ever goes; over the size
// with only newest targets and items in use left, nothing more goes.
std::vector<Eviction> plan_evictions(const std::vector<CacheItem>& items, const CacheLimits& limits, int64_t now_ms);

// The warm targets being read now (a workspace copying one, a job whose view holds one), by
// repository name: eviction and `motor cache clear` leave them alone while a use is held.
class TargetUses {
 public:
  // Held while the target is read; dropping it ends the use. Outliving the registry is harmless.
  class Use {
   public:
    Use() = default;
    Use(Use&& other) noexcept : counts_(std::move(other.counts_)), name_(std::move(other.name_)) {}
    Use& operator=(Use&& other) noexcept;
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    ~Use() { release(); }

   private:
    friend class TargetUses;
    Use(std::weak_ptr<std::map<std::string, int>> counts, std::string name)
        : counts_(std::move(counts)), name_(std::move(name)) {}
    void release();
    std::weak_ptr<std::map<std::string, int>> counts_;
    std::string name_;
  };

  Use hold(const std::string& name);
  bool in_use(const std::string& name) const { return counts_->contains(name); }

 private:
  std::shared_ptr<std::map<std::string, int>> counts_ = std::make_shared<std::map<std::string, int>>();
};

}  // namespace motor::runner
