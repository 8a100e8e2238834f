#include "client/fill_tip.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "base/sha256.hpp"
#include "client/checkout_locate.hpp"
#include "client/git_process.hpp"

namespace motor::client {
namespace {

constexpr std::string_view kOriginHeadRef = "refs/remotes/origin/HEAD";
constexpr std::string_view kHeadsPrefix = "refs/heads/";
constexpr std::string_view kVerifiedAt = "verified_at=";

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  return out;
}

bool is_commit_id(std::string_view s) {
  return s.size() == 40 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The default branch's name as this checkout knows it, from `refs/remotes/origin/HEAD`'s target
// (what a clone records), else init.defaultBranch, else "main".
std::string local_default_branch(std::string_view origin_head_target, std::string_view init_default) {
  constexpr std::string_view kOriginPrefix = "refs/remotes/origin/";
  if (origin_head_target.starts_with(kOriginPrefix)) return std::string(origin_head_target.substr(kOriginPrefix.size()));
  return init_default.empty() ? "main" : std::string(init_default);
}

std::string store_file(const std::string& dir, const TipKey& key) {
  return dir + "/" + to_hex(sha256(key.text()));
}

// Successes older than the 24 h bound are of no use: removed when a new one is stored.
void prune_store(const std::string& dir, int64_t now) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    struct stat st {};
    if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (now - st.st_mtime > kTipVerifiedMaxAgeS) unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

}  // namespace

std::string TipKey::text() const {
  return fmt::format("repository={}\norigin_url={}\nbranch={}\ncommit={}\n", repository, origin_url, branch, commit);
}

std::string commit_tree(const std::string& root, const std::string& commit) {
  auto r = git({"-C", root, "rev-parse", "--verify", "--quiet", commit + "^{tree}"});
  if (!r || r->status != 0) return {};
  return r->out.substr(0, r->out.find('\n'));
}

std::string fill_tip_store_dir() { return cache_base() + "/motor/fill-tips"; }

std::optional<TipKey> local_tip(const std::string& root) {
  auto config = git({"-C", root, "config", "--get-regexp", R"(^(remote\.origin\.url|init\.defaultbranch)$)"});
  if (!config || config->status != 0) return std::nullopt;
  TipKey key;
  key.repository = root;
  std::string_view init_default;
  for (auto line : lines_of(config->out)) {
    const auto sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    if (line.substr(0, sp) == "remote.origin.url") key.origin_url = std::string(line.substr(sp + 1));
    if (line.substr(0, sp) == "init.defaultbranch") init_default = line.substr(sp + 1);
  }
  // A URL that reads as an option would be one on ls-remote's command line.
  if (key.origin_url.empty() || key.origin_url.starts_with("-")) return std::nullopt;
  auto refs = git({"-C", root, "for-each-ref", "--format=%(refname) %(objectname) %(symref)", std::string(kOriginHeadRef),
                   std::string(kHeadsPrefix)});
  if (!refs || refs->status != 0) return std::nullopt;
  std::string_view origin_head_target;
  std::vector<std::pair<std::string_view, std::string_view>> heads;
  for (auto line : lines_of(refs->out)) {
    const auto a = line.find(' '), b = line.find(' ', a + 1);
    if (a == std::string_view::npos || b == std::string_view::npos) continue;
    const auto name = line.substr(0, a);
    if (name == kOriginHeadRef) origin_head_target = line.substr(b + 1);
    else if (name.starts_with(kHeadsPrefix)) heads.emplace_back(name.substr(kHeadsPrefix.size()), line.substr(a + 1, b - a - 1));
  }
  key.branch = local_default_branch(origin_head_target, init_default);
  for (const auto& [branch, commit] : heads) {
    if (branch == key.branch && is_commit_id(commit)) key.commit = std::string(commit);
  }
  if (key.commit.empty()) return std::nullopt;
  return key;
}

FillTipVerifier::FillTipVerifier(std::string store_dir, Clock now, Warn warn)
    : store_dir_(std::move(store_dir)), now_(std::move(now)), warn_(std::move(warn)) {
  if (!now_) now_ = [] { return static_cast<int64_t>(::time(nullptr)); };
  if (!warn_) warn_ = [](const std::string& line) { fmt::print(stderr, "motor: {}\n", line); };
}

std::optional<FillTip> FillTipVerifier::verify(const std::string& repository_root) {
  auto key = local_tip(repository_root);
  if (!key) return std::nullopt;  // no origin or no default branch here: nothing to fill from
  return verify(*key);
}

std::optional<FillTip> FillTipVerifier::verify(const TipKey& key) {
  const int64_t now = now_();
  if (stored_success(key, now)) return FillTip{key.branch, key.commit};
  if (auto q = quiet_until_.find(key.text()); q != quiet_until_.end()) {
    if (now < q->second) return std::nullopt;
    quiet_until_.erase(q);
  }
  if (auto why = query_origin(key)) {
    fail(key, now, *why);
    return std::nullopt;
  }
  store_success(key, now);
  return FillTip{key.branch, key.commit};
}

bool FillTipVerifier::stored_success(const TipKey& key, int64_t now) const {
  const auto text = read_small_file(store_file(store_dir_, key));
  const std::string expected = key.text();
  if (!text || !text->starts_with(expected)) return false;  // another key's file (a hash collision) or none
  std::string_view rest = std::string_view(*text).substr(expected.size());
  if (!rest.starts_with(kVerifiedAt)) return false;
  rest.remove_prefix(kVerifiedAt.size());
  int64_t at = 0;
  size_t digits = 0;
  for (; digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9' && digits < 18; ++digits) at = at * 10 + (rest[digits] - '0');
  if (digits == 0) return false;
  return now >= at && now - at <= kTipVerifiedMaxAgeS;  // a stamp from the future is no success
}

void FillTipVerifier::store_success(const TipKey& key, int64_t now) {
  if (::mkdir(store_dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    auto parent = store_dir_.substr(0, store_dir_.rfind('/'));
    ::mkdir(parent.c_str(), 0700);  // $XDG_CACHE_HOME/motor: the sync makes it too
    ::mkdir(store_dir_.c_str(), 0700);
  }
  prune_store(store_dir_, now);
  // Not kept: the next run checks again, which costs one query and authorizes nothing more.
  (void)write_file_atomically(store_file(store_dir_, key), key.text() + std::string(kVerifiedAt) + std::to_string(now) + "\n",
                              0600);
}

std::optional<std::string> FillTipVerifier::query_origin(const TipKey& key) {
  ++origin_queries_;
  GitIo io;
  io.timeout_ms = kOriginQueryTimeoutMs;
  auto r = git({"-C", key.repository, "ls-remote", "--symref", key.origin_url, "HEAD"}, {"GIT_TERMINAL_PROMPT=0"}, io);
  if (!r) return fmt::format("cannot ask origin {}: {}", key.origin_url, r.error().message);
  if (r->timed_out) return fmt::format("origin {} did not answer within {} s", key.origin_url, kOriginQueryTimeoutMs / 1000);
  if (r->status != 0) {
    const auto first = lines_of(r->err);
    return fmt::format("origin {} did not answer (git ls-remote: {})", key.origin_url, first.empty() ? "failed" : first.front());
  }
  std::string_view branch, commit;
  for (auto line : lines_of(r->out)) {
    if (line.starts_with("ref: ") && line.ends_with("\tHEAD")) {
      auto ref = line.substr(5, line.size() - 5 - 5);
      if (ref.starts_with(kHeadsPrefix)) branch = ref.substr(kHeadsPrefix.size());
    } else if (line.ends_with("\tHEAD")) {
      commit = line.substr(0, line.size() - 5);
    }
  }
  if (branch.empty() || !is_commit_id(commit)) return fmt::format("origin {} advertises no default branch", key.origin_url);
  if (branch != key.branch) {
    return fmt::format("origin's default branch is \"{}\", this checkout's is \"{}\"", branch, key.branch);
  }
  if (commit != key.commit) {
    return fmt::format("local {} is at {}, origin's at {}", key.branch, key.commit.substr(0, 12), commit.substr(0, 12));
  }
  return std::nullopt;
}

void FillTipVerifier::fail(const TipKey& key, int64_t now, const std::string& why) {
  quiet_until_[key.text()] = now + kTipFailureQuietS;
  warn_("no compile-cache fill from this run: " + why);
}

}  // namespace motor::client
