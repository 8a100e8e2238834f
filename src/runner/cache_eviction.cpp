#include "runner/cache_eviction.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>

namespace motor::runner {
namespace {

bool parse_whole(std::string_view text, int64_t& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size() && out >= 0;
}

}  // namespace

std::vector<MeasuredPath> parse_du_output(std::string_view out) {
  std::vector<MeasuredPath> found;
  while (!out.empty()) {
    const size_t end = out.find('\n');
    const std::string_view line = out.substr(0, end);
    out = end == std::string_view::npos ? std::string_view{} : out.substr(end + 1);
    const size_t tab1 = line.find('\t');
    const size_t tab2 = tab1 == std::string_view::npos ? tab1 : line.find('\t', tab1 + 1);
    if (tab2 == std::string_view::npos || tab2 + 1 >= line.size()) continue;
    MeasuredPath m;
    if (!parse_whole(line.substr(0, tab1), m.bytes) || !parse_whole(line.substr(tab1 + 1, tab2 - tab1 - 1), m.mtime_s)) {
      continue;
    }
    m.path = std::string(line.substr(tab2 + 1));
    found.push_back(std::move(m));
  }
  return found;
}

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string_view reason_name(EvictReason reason) { return reason == EvictReason::kSize ? "size" : "age"; }

std::vector<Eviction> plan_evictions(const std::vector<CacheItem>& items, const CacheLimits& limits, int64_t now_ms) {
  std::vector<Eviction> out;
  std::vector<const CacheItem*> kept;
  int64_t total = 0;
  for (const CacheItem& item : items) {
    const bool too_old = limits.max_age_s > 0 && now_ms - item.last_used_ms > limits.max_age_s * 1000;
    if (!item.in_use && too_old) {
      out.push_back({item, EvictReason::kAge});
      continue;
    }
    kept.push_back(&item);
    total += item.bytes;
  }
  if (limits.max_bytes <= 0 || total <= limits.max_bytes) return out;
  std::vector<const CacheItem*> candidates;
  for (const CacheItem* item : kept) {
    if (!item->in_use && !item->newest_target) candidates.push_back(item);
  }
  // Least recently used first; of one repository's, the fill workspace before a leftover target.
  std::stable_sort(candidates.begin(), candidates.end(), [](const CacheItem* a, const CacheItem* b) {
    if (a->last_used_ms != b->last_used_ms) return a->last_used_ms < b->last_used_ms;
    return a->kind == CacheItemKind::kFill && b->kind != CacheItemKind::kFill;
  });
  for (const CacheItem* item : candidates) {
    if (total <= limits.max_bytes) break;
    out.push_back({*item, EvictReason::kSize});
    total -= item->bytes;
  }
  return out;
}

TargetUses::Use& TargetUses::Use::operator=(Use&& other) noexcept {
  if (this != &other) {
    release();
    counts_ = std::move(other.counts_);
    name_ = std::move(other.name_);
  }
  return *this;
}

void TargetUses::Use::release() {
  auto counts = counts_.lock();
  counts_.reset();
  if (!counts) return;
  auto it = counts->find(name_);
  if (it != counts->end() && --it->second <= 0) counts->erase(it);
}

TargetUses::Use TargetUses::hold(const std::string& name) {
  ++(*counts_)[name];
  return Use(counts_, name);
}

}  // namespace motor::runner
