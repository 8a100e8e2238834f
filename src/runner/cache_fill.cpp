#include "runner/cache_fill.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "base/sha256.hpp"

namespace motor::runner {
namespace {

constexpr std::string_view kRecordSuffix = ".record";

Status make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Error{"io", fmt::format("cannot make {}: {}", path, std::strerror(errno))};
  }
  return {};
}

std::string field_of(std::string_view text, std::string_view name) {
  const std::string key = std::string(name) + "=";
  for (size_t at = 0; at < text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    const auto line = text.substr(at, nl - at);
    if (line.starts_with(key)) return std::string(line.substr(key.size()));
    at = nl + 1;
  }
  return {};
}

}  // namespace

std::string_view result_name(FillResult r) {
  switch (r) {
    case FillResult::kBuilding: return "building";
    case FillResult::kOk: return "ok";
    case FillResult::kFailed: return "failed";
  }
  return "failed";
}

Expected<std::optional<FillTip>> parse_fill_tip(simdjson::dom::parser& parser, std::string_view params_json) {
  simdjson::dom::element root, field;
  if (parser.parse(params_json.data(), params_json.size()).get(root)) return Error{"bad_request", "params are not valid JSON"};
  if (root.at_key("fill_tip").get(field) || field.is_null()) return std::optional<FillTip>{};
  std::string_view branch, commit;
  const bool hex = [&] {
    if (field["commit"].get_string().get(commit) || (commit.size() != 40 && commit.size() != 64)) return false;
    return commit.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  }();
  if (field["branch"].get_string().get(branch) || branch.empty() || branch.size() > 255 || !hex) {
    return Error{"bad_request", R"(field "params.fill_tip" must be {"branch": a branch name, "commit": a commit id})"};
  }
  return std::optional<FillTip>{FillTip{std::string(branch), std::string(commit)}};
}

std::string CacheFills::name_of(const std::string& caller, const std::string& repository_root) const {
  return to_hex(sha256(caller + '\0' + repository_root)).substr(0, 32);
}

Status CacheFills::open() {
  for (const auto& dir : {root_, root_ + "/fills", root_ + "/targets"}) {
    if (auto s = make_dir(dir, 0700); !s) return s;
  }
  DIR* d = ::opendir((root_ + "/targets").c_str());
  if (!d) return Error{"io", fmt::format("cannot read {}/targets: {}", root_, std::strerror(errno))};
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (!name.ends_with(kRecordSuffix)) continue;
    const std::string text = read_small_file(root_ + "/targets/" + std::string(name)).value_or("");
    RepositoryFill fill;
    fill.caller = field_of(text, "caller");
    fill.repository_root = field_of(text, "repository_root");
    fill.published_commit = field_of(text, "commit");
    fill.published_source = field_of(text, "source_commit");
    fill.published_at_ms = std::atoll(field_of(text, "published_at_ms").c_str());
    if (fill.caller.empty() || fill.repository_root.empty() || fill.published_commit.empty()) continue;
    if (name_of(fill.caller, fill.repository_root) + std::string(kRecordSuffix) != name) continue;
    fill.last = FillResult::kOk;
    fill.last_used_ms = fill.published_at_ms;
    repos_[name_of(fill.caller, fill.repository_root)] = std::move(fill);
  }
  ::closedir(d);
  return {};
}

bool CacheFills::wants(const std::string& caller, const std::string& repository_root, const std::string& commit) const {
  if (repository_root.empty() || repository_root.find('\n') != std::string::npos || caller.find('\n') != std::string::npos) {
    return false;  // not a name a record line can hold
  }
  auto it = repos_.find(name_of(caller, repository_root));
  if (it == repos_.end()) return true;
  const RepositoryFill& f = it->second;
  return f.building_job.empty() && f.published_commit != commit && f.failed_commit != commit;
}

void CacheFills::started(const std::string& caller, const std::string& repository_root, const std::string& commit,
                         const std::string& source_commit, const std::string& job_id) {
  RepositoryFill& f = repos_[name_of(caller, repository_root)];
  f.caller = caller;
  f.repository_root = repository_root;
  f.building_job = job_id;
  f.building_commit = commit;
  f.building_source = source_commit;
  f.last = FillResult::kBuilding;
}

bool CacheFills::is_fill(const std::string& job_id) const { return of_job(job_id) != nullptr; }

const RepositoryFill* CacheFills::of_job(const std::string& job_id) const {
  for (const auto& [name, f] : repos_) {
    if (!job_id.empty() && f.building_job == job_id) return &f;
  }
  return nullptr;
}

Expected<std::string> CacheFills::finished(const std::string& job_id, bool succeeded, int64_t now_ms) {
  for (auto& [name, f] : repos_) {
    if (job_id.empty() || f.building_job != job_id) continue;
    f.building_job.clear();
    f.last_used_ms = now_ms;
    std::string replaced;
    Status published = succeeded ? publish(f, now_ms, replaced) : Status{};
    if (succeeded && published) {
      f.last = FillResult::kOk;
      f.failed_commit.clear();
      return replaced;
    }
    f.last = FillResult::kFailed;
    f.failed_commit = f.building_commit;
    if (!published) return published.error();
    return Error{"fill_failed", "the fill command failed"};
  }
  return Error{"not_a_fill", "no fill runs as job " + job_id};
}

Status CacheFills::publish(RepositoryFill& f, int64_t now_ms, std::string& replaced) {
  const std::string name = name_of(f.caller, f.repository_root);
  const std::string source = root_ + "/fills/" + name + "/published.new";
  const std::string dest_name = name + "." + f.building_commit;
  const std::string dest = root_ + "/targets/" + dest_name;
  struct stat st {};
  if (::lstat(source.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error{"io", "the fill left no published.new directory"};
  }
  if (::rename(source.c_str(), dest.c_str()) != 0) {
    return Error{"io", fmt::format("cannot move the fill's target to {}: {}", dest, std::strerror(errno))};
  }
  // The link flips in one rename: a reader sees the old target or the new one, never neither.
  const std::string link = target_link(f.caller, f.repository_root);
  char old[4096];
  const ssize_t old_len = ::readlink(link.c_str(), old, sizeof old - 1);
  const std::string tmp_link = link + ".new";
  ::unlink(tmp_link.c_str());
  if (::symlink(dest_name.c_str(), tmp_link.c_str()) != 0 || ::rename(tmp_link.c_str(), link.c_str()) != 0) {
    return Error{"io", fmt::format("cannot publish {}: {}", link, std::strerror(errno))};
  }
  if (old_len > 0 && std::string_view(old, static_cast<size_t>(old_len)) != dest_name) {
    replaced = "targets/" + std::string(old, static_cast<size_t>(old_len));
  }
  f.published_commit = f.building_commit;
  f.published_source = f.building_source;
  f.published_at_ms = now_ms;
  const std::string record =
      fmt::format("caller={}\nrepository_root={}\ncommit={}\nsource_commit={}\npublished_at_ms={}\n", f.caller,
                  f.repository_root, f.published_commit, f.published_source, now_ms);
  return write_file_atomically(root_ + "/targets/" + name + std::string(kRecordSuffix), record, 0600);
}

Expected<std::string> CacheFills::fill_dir(const std::string& caller, const std::string& repository_root, uid_t uid,
                                           gid_t gid) const {
  const std::string dir = root_ + "/fills/" + name_of(caller, repository_root);
  for (const std::string& d : {dir, dir + "/tree"}) {
    if (auto s = make_dir(d, 0700); !s) return s.error();
    struct stat st {};
    if (::lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return Error{"io", d + " is not a directory"};
    if ((st.st_uid != uid || st.st_gid != gid) && ::chown(d.c_str(), uid, gid) != 0) {
      return Error{"io", fmt::format("cannot give {} to the fill account: {}", d, std::strerror(errno))};
    }
  }
  return dir + "/tree";
}

void CacheFills::mark_used(const std::string& name, int64_t now_ms) {
  if (auto it = repos_.find(name); it != repos_.end()) it->second.last_used_ms = std::max(it->second.last_used_ms, now_ms);
}

void CacheFills::forget_build(const std::string& name) {
  auto it = repos_.find(name);
  if (it == repos_.end()) return;
  RepositoryFill never_built;
  never_built.caller = it->second.caller;
  never_built.repository_root = it->second.repository_root;
  it->second = std::move(never_built);
}

std::string CacheFills::target_link(const std::string& caller, const std::string& repository_root) const {
  return root_ + "/targets/" + name_of(caller, repository_root);
}

std::optional<workspace::WarmTarget> CacheFills::warm_target(const std::string& caller,
                                                             const std::string& repository_root) const {
  auto it = repos_.find(name_of(caller, repository_root));
  if (it == repos_.end() || it->second.published_commit.empty() || it->second.published_source.empty()) return std::nullopt;
  const std::string dir = root_ + "/targets/" + it->first + "." + it->second.published_commit;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return workspace::WarmTarget{dir, it->second.published_source, nullptr};
}

void CacheFills::write_repositories(protocol::JsonWriter& w, const std::string& caller, int64_t now_ms) const {
  w.key("repositories").begin_array();
  for (const auto& [name, f] : repos_) {
    if (f.caller != caller) continue;
    w.begin_object().field("repository_root", f.repository_root);
    if (f.published_commit.empty()) {
      w.field_null("warm_target_age_s").field_null("published_commit");
    } else {
      w.field("warm_target_age_s", std::max<int64_t>(0, (now_ms - f.published_at_ms) / 1000));
      w.field("published_commit", f.published_commit);
    }
    if (f.last) w.field("last_rebuild_result", result_name(*f.last));
    else w.field_null("last_rebuild_result");
    w.end_object();
  }
  w.end_array();
}

}  // namespace motor::runner
