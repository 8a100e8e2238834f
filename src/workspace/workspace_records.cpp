// The records of prepared workspaces: <state>/workspace-git/<caller>/<name>.record, one
// `field=value` line each, where <name> is workspace_key_file_name(key) (a path key's is a hash:
// the record's workspace_key line says which key it is). Written whole and durable; read back at
// start.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/json_writer.hpp"
#include "reactor/slow_call.hpp"
#include "workspace/workspace_dir.hpp"
#include "workspace/workspace_names.hpp"
#include "workspace/workspaces.hpp"
#include "workspace/workspaces_internal.hpp"

namespace motor::workspace {

namespace detail {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string id_key(const std::string& caller, const std::string& key) { return caller + "/" + key; }

// FNV-1a (collisions only ever mix objects of one caller's own repositories, which git keeps
// apart by hash anyway).
std::string path_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::string refusal_json(const std::string& reason) {
  protocol::JsonWriter w;
  w.begin_object().field("type", "refused_before_start").field("reason", reason).end_object();
  return w.take();
}

}  // namespace detail

using namespace detail;

namespace {

constexpr std::string_view kRecordSuffix = ".record";
constexpr std::string_view kCheckoutSuffix = ".checkout";

// One record file's fields; the key it names (its workspace_key line, for a path key's hashed name).
struct RecordFile {
  PreparedTree tree;
  GitState git;
  std::string workspace_key;
};

RecordFile read_record_file(const std::string& path) {
  std::ifstream in(path);
  RecordFile r;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "workspace_key") r.workspace_key = v;
    else if (k == "repository_root") r.tree.repository_root = v;
    else if (k == "commit") r.tree.commit = v;
    else if (k == "tree") r.tree.tree = v;
    else if (k == "bundle_bytes") r.tree.bundle_bytes = std::atoll(v.c_str());
    else if (k == "prepared_at_ms") r.tree.prepared_at_ms = std::atoll(v.c_str());
    else if (k == "screened_base" && protocol::is_object_id(v)) r.tree.screened_base = v;
    else if (k == "git_present") r.git.present = v == "1";
    else if (k == "git_head" && !v.empty()) r.git.head = v;
    else if (k == "git_ref" && !v.empty()) r.git.ref = v;
    else if (k == "git_index_tree" && !v.empty()) r.git.index_tree = v;
    else if (k == "git_stash_count") r.git.stash_count = std::atoll(v.c_str());
  }
  return r;
}

}  // namespace

std::string Workspaces::meta_dir(const std::string& caller, const std::string& key) const {
  return s_.state_dir + "/workspace-git/" + caller + "/" + workspace_key_file_name(key);
}
std::string Workspaces::record_path(const std::string& caller, const std::string& key) const {
  return meta_dir(caller, key) + std::string(kRecordSuffix);
}
std::string Workspaces::checkout_mark_path(const std::string& caller, const std::string& key) const {
  return meta_dir(caller, key) + std::string(kCheckoutSuffix);
}

Status Workspaces::mark_checkout(const std::string& caller, const std::string& key) const {
  reactor::SlowCall timed("marking a checkout");
  // It holds the key: a path key's name is a hash the next start cannot read back.
  return write_file_atomically(checkout_mark_path(caller, key), key, 0600);
}

void Workspaces::load_records(std::vector<std::pair<std::string, std::string>>& interrupted) {
  const std::string base = s_.state_dir + "/workspace-git";
  DIR* callers = opendir(base.c_str());
  if (!callers) return;
  while (dirent* c = readdir(callers)) {
    const std::string caller = c->d_name;
    if (caller[0] == '.') continue;
    const std::string dir = base + "/" + caller;
    DIR* keys = opendir(dir.c_str());
    if (!keys) continue;
    while (dirent* k = readdir(keys)) {
      const std::string_view name = k->d_name;
      if (name.ends_with(kCheckoutSuffix)) {
        const std::string_view stem = name.substr(0, name.size() - kCheckoutSuffix.size());
        if (auto key = key_of_file(dir + "/" + std::string(name), stem)) interrupted.emplace_back(caller, *key);
        continue;
      }
      if (!name.ends_with(kRecordSuffix)) continue;
      RecordFile file = read_record_file(dir + "/" + std::string(name));
      auto key = key_named(name.substr(0, name.size() - kRecordSuffix.size()), file.workspace_key);
      if (!key || !protocol::is_object_id(file.tree.commit) || !protocol::is_object_id(file.tree.tree)) continue;
      auto workspace = workspace_dir_path(s_.workspace_root, caller, *key);
      if (!workspace) continue;
      Record r;
      r.tree = std::move(file.tree);
      r.git = std::move(file.git);
      r.mirror = mirror_path(caller, r.tree.repository_root);
      r.tree.workspace_dir = *workspace;
      records_[id_key(caller, *key)] = std::move(r);
    }
    closedir(keys);
  }
  closedir(callers);
}

Status Workspaces::save_record(const std::string& caller, const std::string& key, const Record& r) {
  reactor::SlowCall timed("writing a workspace record");
  if (auto st = ensure_owned_dir(s_.state_dir + "/workspace-git/" + caller, 0700, 0, 0); !st) return st;
  std::ostringstream out;
  out << "workspace_key=" << key << "\nrepository_root=" << r.tree.repository_root << "\ncommit=" << r.tree.commit
      << "\ntree=" << r.tree.tree << "\nbundle_bytes=" << r.tree.bundle_bytes << "\nprepared_at_ms=" << r.tree.prepared_at_ms
      << "\n";
  if (!r.tree.screened_base.empty()) out << "screened_base=" << r.tree.screened_base << "\n";
  // The .git a job left (git_state_changed of the next job compares with it), so a restart
  // does not forget it. Its values are single lines (the scan's output is split on '\n').
  out << "git_present=" << (r.git.present ? 1 : 0) << "\ngit_head=" << r.git.head.value_or("")
      << "\ngit_ref=" << r.git.ref.value_or("") << "\ngit_index_tree=" << r.git.index_tree.value_or("")
      << "\ngit_stash_count=" << r.git.stash_count << "\n";
  // Whole and durable (base/atomic_file.hpp): a record lost in a crash would cost one full
  // bundle on the next prepare and a git_state_changed reported against "absent".
  return write_file_atomically(record_path(caller, key), out.str(), 0600);
}

}  // namespace motor::workspace
