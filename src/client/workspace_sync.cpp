#include "client/workspace_sync.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <chrono>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "client/checkout_fingerprint.hpp"
#include "client/git_process.hpp"
#include "motor/unique_fd.hpp"
#include "protocol/base64.hpp"
#include "protocol/git_bundle.hpp"
#include "protocol/json_writer.hpp"

namespace motor::client {
namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// git that must succeed: its trimmed stdout, or an error quoting git.
Expected<std::string> git_ok(const std::vector<std::string>& args, const std::vector<std::string>& extra = {}) {
  auto r = git(args, extra);
  if (!r) return r.error();
  if (r->status != 0) {
    return Error{"git", fmt::format("git {} failed: {}", args.size() > 2 ? args[2] : args[0], trimmed(r->err))};
  }
  return trimmed(r->out);
}

bool file_exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

Status copy_file(const std::string& from, const std::string& to) {
  UniqueFd in(open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return Error{"io", fmt::format("reading {}: {}", from, std::strerror(errno))};
  UniqueFd out(open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return Error{"io", fmt::format("writing {}: {}", to, std::strerror(errno))};
  char buf[65536];
  for (ssize_t n; (n = read(in.get(), buf, sizeof buf)) > 0;) {
    if (write(out.get(), buf, static_cast<size_t>(n)) != n) return Error{"io", "writing " + to};
  }
  return {};
}

// The reply to request `id` (stream records of other requests are not expected here).
Expected<protocol::Message> reply_to(Connection& conn, int64_t id) {
  for (;;) {
    auto m = conn.read();
    if (!m && m.error().code != "unreachable" && m.error().code != "protocol") return m.error();  // the runner's refusal
    if (!m) return Error{"transfer_interrupted", "the connection to the runner broke: " + m.error().message};
    if (m->id == id && m->kind != protocol::Message::Kind::kRecord) return m;
  }
}

// Reads the final outcome of a prepare from a result; false if the result has none yet.
bool read_outcome(simdjson::dom::parser& parser, const std::string& raw, PrepareOutcome& out) {
  simdjson::dom::element result;
  if (parser.parse(raw)["result"].get(result)) return false;
  simdjson::dom::element outcome;
  if (result["outcome"].get(outcome) || outcome.is_null()) return false;
  std::string_view type, reason, detail, tree;
  if (outcome["type"].get_string().get(type)) {}
  out.raw = raw;
  out.prepared = type == "prepared";
  if (!outcome["reason"].get_string().get(reason)) out.reason = std::string(reason);
  if (!result["refusal_detail"].get_string().get(detail)) out.detail = std::string(detail);
  if (!result["tree_hash"].get_string().get(tree)) out.tree_hash = std::string(tree);
  int64_t n = 0;
  if (!result["bundle_bytes"].get_int64().get(n)) out.bundle_bytes = n;
  if (!result["fetch_ms"].get_int64().get(n)) out.fetch_ms = n;
  if (!result["checkout_ms"].get_int64().get(n)) out.checkout_ms = n;
  out.transient = result["retry_after_ms"].get_int64().get(n) == simdjson::SUCCESS;  // absent: lasting
  return true;
}

// The commits of `have` this cache can build on. A commit the cache made is a loose object of
// its own (or of the checkout's, through alternates) unless a gc packed it: checked with a
// stat, and only the rest asked of git, in one call.
std::vector<std::string> commits_we_have(const std::string& cache, const std::string& checkout_objects,
                                         const std::vector<std::string>& have) {
  std::vector<std::string> known, unsure;
  // A few suffice (the first is the parent); bounded so git's answer fits a pipe unread.
  for (const auto& h : std::span(have).first(std::min<size_t>(have.size(), 256))) {
    const std::string rel = "/" + h.substr(0, 2) + "/" + h.substr(2);
    if (file_exists(cache + "/objects" + rel) || file_exists(checkout_objects + rel)) known.push_back(h);
    else unsure.push_back(h);
  }
  if (unsure.empty()) return known;
  std::string query;
  for (const auto& h : unsure) query += h + "\n";
  auto r = git({"--git-dir=" + cache, "cat-file", "--batch-check=%(objectname) %(objecttype)"}, {}, GitIo{.input = query, .out_fd = -1, .wait = true});
  if (!r || r->status != 0) return known;
  for (const auto& h : unsure) {
    if (r->out.find(h + " commit\n") != std::string::npos) known.push_back(h);
  }
  // Keep the runner's order: its first is this workspace's last commit, the best parent.
  std::vector<std::string> ordered;
  for (const auto& h : have) {
    if (std::find(known.begin(), known.end(), h) != known.end()) ordered.push_back(h);
  }
  return ordered;
}

// Every prepare leaves a commit, and the blobs of files the checkout's own objects lack, loose
// in the cache. Past about as many loose objects as git's own gc.auto (6,700, estimated from
// 16 of the 256 fan-out directories, as git does from one), `git gc` runs in the background:
// it packs what the keep refs (each workspace's last commit) reach and prunes the rest once it
// is a day old (the private index may name blobs of a commit not made yet). Not waited for.
void collect_cache_if_large(const std::string& cache) {
  size_t loose = 0;
  for (int i = 0; i < 16; ++i) {
    if (DIR* d = opendir(fmt::format("{}/objects/{:02x}", cache, i).c_str())) {
      while (dirent* e = readdir(d)) loose += e->d_name[0] != '.';
      closedir(d);
    }
  }
  if (loose <= 16 * 27) return;
  (void)git({"--git-dir=" + cache, "gc", "--quiet", "--prune=1.day.ago"}, {}, GitIo{.input = {}, .out_fd = -1, .wait = false});
}

// $XDG_CACHE_HOME (or ~/.cache): the client's cache repositories and fingerprints.
std::string cache_base() {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  return xdg && *xdg ? xdg : std::string(home ? home : "/tmp") + "/.cache";
}

// The checkout `dir` is in, without starting git: only for a checkout whose last sync left a
// fingerprint (which holds git's own answers for it) and a plain `.git` directory; nullopt
// sends the caller to `git rev-parse`.
std::optional<Checkout> checkout_from_fingerprint(const std::string& dir) {
  char real[PATH_MAX];
  if (!realpath(dir.c_str(), real)) return std::nullopt;
  std::string root = real;
  for (;;) {
    struct stat st {};
    if (root.find("/.git/") != std::string::npos || root.ends_with("/.git")) return std::nullopt;  // git says: not a work tree
    if (lstat((root == "/" ? std::string("/.git") : root + "/.git").c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) return std::nullopt;  // a worktree link, or someone else's
      break;
    }
    if (root == "/") return std::nullopt;
    root.resize(std::max<size_t>(root.rfind('/'), 1));
  }
  UniqueFd fd(open(fingerprint_path(cache_base(), root).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  Checkout c;
  c.root = root;
  const std::string here = real;
  c.rel_cwd = here.size() > root.size() ? here.substr(root.size() + (root == "/" ? 0 : 1)) : "";
  c.objects_dir = root + "/.git/objects";
  c.index_path = root + "/.git/index";
  return c;
}

void show_progress(int64_t sent, int64_t total, std::chrono::steady_clock::time_point start, bool done) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = s > 0 ? static_cast<double>(sent) / s : 0;
  fmt::print(stderr, "\rmotor: sending the workspace: {:.1f} / {:.1f} MiB ({:.1f} MiB/s){}", static_cast<double>(sent) / 1048576.0,
             static_cast<double>(total) / 1048576.0, rate / 1048576.0, done ? "\n" : "");
}

}  // namespace

Expected<Checkout> find_checkout(const std::string& dir) {
  if (auto known = checkout_from_fingerprint(dir)) return *known;
  // One git call for all four: each process costs ~10-20 ms on a loaded host.
  auto r = git({"-C", dir, "rev-parse", "--show-toplevel", "--show-prefix", "--path-format=absolute", "--git-path",
                "objects", "--git-path", "index"});
  if (!r) return r.error();
  if (r->status != 0) return Error{"not_a_checkout", dir + " is not inside a Git checkout"};
  std::vector<std::string> lines;
  for (size_t at = 0; at < r->out.size();) {
    const auto nl = r->out.find('\n', at);
    if (nl == std::string::npos) break;
    lines.push_back(r->out.substr(at, nl - at));
    at = nl + 1;
  }
  if (lines.size() != 4) return Error{"not_a_checkout", "git rev-parse: unexpected output"};
  Checkout c;
  c.root = lines[0];
  c.rel_cwd = lines[1];
  while (!c.rel_cwd.empty() && c.rel_cwd.back() == '/') c.rel_cwd.pop_back();
  c.objects_dir = lines[2];
  c.index_path = lines[3];
  return c;
}

std::string derive_workspace_key(const std::string& root) {
  std::string base = root.substr(root.rfind('/') + 1);
  std::string safe;
  for (char c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    safe.push_back(ok ? c : '_');
  }
  while (!safe.empty() && safe[0] == '.') safe.erase(0, 1);
  if (safe.size() > 100) safe.resize(100);
  if (safe.empty()) safe = "checkout";
  return fmt::format("{}-{:08x}", safe, static_cast<uint32_t>(path_hash(root)));
}

Expected<PrepareOutcome> prepare_workspace(Connection& conn, const Checkout& checkout, const std::string& key,
                                           bool progress, const std::optional<std::string>& untrusted_base) {
  const std::string& root = checkout.root;
  const std::string* objects = &checkout.objects_dir;
  const std::string* index = &checkout.index_path;

  // The private cache repository: objects of synthetic commits, the private index (its stat
  // data makes the next `git add` hash only what changed) and the last bundled commits.
  const std::string cache = fmt::format("{}/motor/repos/{:016x}.git", cache_base(), path_hash(*objects));
  if (!file_exists(cache + "/HEAD")) {
    if (auto s = git_ok({"init", "-q", "--bare", cache}); !s) return s.error();
    if (auto s = git_ok({"--git-dir=" + cache, "config", "gc.auto", "0"}); !s) return s.error();
    const std::string alternates = cache + "/objects/info/alternates";
    UniqueFd f(open(alternates.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    const std::string line = *objects + "\n";
    if (!f || write(f.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return Error{"io", "writing " + alternates};
    }
  }
  const std::string private_index = cache + "/motor-index";
  if (!file_exists(private_index) && file_exists(*index)) {
    if (auto s = copy_file(*index, private_index); !s) return s.error();
  }
  const std::vector<std::string> private_env = {"GIT_INDEX_FILE=" + private_index, "GIT_OBJECT_DIRECTORY=" + cache + "/objects"};
  // Nothing changed since the last sync (checkout_fingerprint.hpp): its tree, without git.
  const std::string fingerprint = fingerprint_path(cache_base(), root);
  std::optional<std::string> unchanged = untrusted_base ? std::nullopt : unchanged_tree(fingerprint, root);
  if (unchanged && !protocol::is_object_id(*unchanged)) unchanged.reset();
  const bool plain_layout = *objects == index->substr(0, index->rfind('/')) + "/objects";
  FingerprintStart fp_start;
  if (!unchanged && plain_layout) fp_start = begin_fingerprint(root, index->substr(0, index->rfind('/')), cache);
  Expected<std::string> tree = unchanged ? Expected<std::string>(*unchanged) : Expected<std::string>(std::string());
  if (!unchanged) {
    if (auto s = git_ok({"-C", root, "add", "-A", "--", "."}, private_env); !s) return s.error();
    tree = git_ok({"-C", root, "write-tree"}, private_env);
    if (!tree) return tree.error();
  }
  // After a prepare the runner has this tree: the fingerprint vouches for it next time.
  auto remember = [&](const PrepareOutcome& o) {
    if (!unchanged && o.prepared && !untrusted_base) save_fingerprint(fingerprint, root, *tree, private_index, fp_start);
  };
  const std::vector<std::string> fixed_identity = {
      "GIT_AUTHOR_NAME=motor", "GIT_AUTHOR_EMAIL=motor@localhost", "GIT_AUTHOR_DATE=@0 +0000",
      "GIT_COMMITTER_NAME=motor", "GIT_COMMITTER_EMAIL=motor@localhost", "GIT_COMMITTER_DATE=@0 +0000"};
  // Untrusted: the base revision's tree as a parentless commit of its own; the synthetic commit
  // gets it as a parent, so the bundle carries what the runner needs to screen the change.
  std::string screen_base;
  if (untrusted_base) {
    auto base_tree = git_ok({"-C", root, "rev-parse", "--verify", "-q", "--end-of-options", *untrusted_base + "^{tree}"});
    if (!base_tree) return Error{"git", "--base " + *untrusted_base + " is not a revision of this checkout"};
    auto base = git_ok({"--git-dir=" + cache, "commit-tree", *base_tree, "-m", "motor screen base"}, fixed_identity);
    if (!base) return base.error();
    screen_base = *base;
  }

  simdjson::dom::parser parser;
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", key).field("repository_root", root).field("tree_hash", *tree);
  if (untrusted_base) w.field("untrusted", true).field("screen_base", screen_base);
  w.end_object();
  auto id = conn.request("workspace.prepare", w.str());
  if (!id && id.error().code != "unreachable") return id.error();  // the runner's refusal of this connection
  if (!id) return Error{"transfer_interrupted", id.error().message};
  auto first = reply_to(conn, *id);
  if (!first) return first.error();
  if (first->kind == protocol::Message::Kind::kError) return Error{first->error_code, first->error_message};
  PrepareOutcome outcome;
  if (read_outcome(parser, first->raw, outcome)) {
    remember(outcome);
    return outcome;
  }

  simdjson::dom::element result;
  if (parser.parse(first->raw)["result"].get(result)) return Error{"bad_reply", "workspace.prepare: no result"};
  std::string_view tid_view;
  if (result["transfer_id"].get_string().get(tid_view)) return Error{"bad_reply", "workspace.prepare: no transfer_id"};
  const std::string transfer_id(tid_view);
  int64_t chunk = 512 * 1024, max_bundle = INT64_MAX;
  if (result["chunk_bytes"].get_int64().get(chunk)) {}
  if (result["max_bundle_bytes"].get_int64().get(max_bundle)) {}
  std::vector<std::string> have;
  simdjson::dom::array have_list;
  if (!result["have"].get_array().get(have_list)) {
    for (auto h : have_list) {
      std::string_view c;
      if (!h.get_string().get(c) && protocol::is_object_id(c)) have.emplace_back(c);
    }
  }
  // Prerequisites: what the runner has that we still have; the first becomes the parent, so
  // the pack holds only the objects that differ from it.
  const std::vector<std::string> known = commits_we_have(cache, *objects, have);
  std::vector<std::string> commit_args = {"--git-dir=" + cache, "commit-tree", *tree, "-m", "motor workspace " + key};
  if (!known.empty()) {
    commit_args.push_back("-p");
    commit_args.push_back(known.front());
  }
  if (!screen_base.empty()) {
    commit_args.push_back("-p");
    commit_args.push_back(screen_base);
  }
  auto commit = git_ok(commit_args, fixed_identity);
  if (!commit && unchanged) unlink(fingerprint.c_str());  // its tree is gone from the cache: the next run syncs in full
  if (!commit) return commit.error();
  // The keep ref (what the cache's pruning keeps) is written while the bundle is made and sent.
  auto keep = git({"--git-dir=" + cache, "update-ref", "refs/motor/keep/" + key, *commit}, {}, GitIo{.input = {}, .out_fd = -1, .wait = false});
  struct Reaper {
    pid_t pid;
    ~Reaper() { reap(pid); }
  } keep_reaper{keep ? keep->pid : -1};
  // The bundle: its header written here, the pack by pack-objects (what `git bundle create`
  // does, without its extra process and ref walk).
  const std::string bundle = cache + "/motor-" + std::to_string(getpid()) + ".bundle";
  struct Cleanup {
    std::string path;
    ~Cleanup() { unlink(path.c_str()); }
  } cleanup{bundle};
  UniqueFd fd(open(bundle.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return Error{"io", fmt::format("writing {}: {}", bundle, std::strerror(errno))};
  const std::string header = protocol::format_bundle_header(*commit, "refs/motor/synthetic", known);
  if (write(fd.get(), header.data(), header.size()) != static_cast<ssize_t>(header.size())) {
    return Error{"io", "writing the bundle " + bundle};
  }
  std::string revs = *commit + "\n";
  for (const auto& k : known) revs += "^" + k + "\n";
  auto packed = git({"--git-dir=" + cache, "pack-objects", "--stdout", "--thin", "--delta-base-offset", "--revs", "-q"}, {},
                    GitIo{.input = revs, .out_fd = fd.get(), .wait = true});
  if (!packed) return packed.error();
  if (packed->status != 0) return Error{"git", "git pack-objects failed: " + trimmed(packed->err)};
  struct stat st {};
  if (fstat(fd.get(), &st) < 0) return Error{"io", "reading the bundle " + bundle};
  const int64_t total = st.st_size;
  if (total > max_bundle) {
    return Error{"bundle_rejected", fmt::format("the bundle is {} bytes, over the runner's limit of {} bytes "
                                                "(max_bundle_size); nothing was sent",
                                                total, max_bundle)};
  }

  const auto start = std::chrono::steady_clock::now();
  auto last_shown = start;
  std::string data(static_cast<size_t>(chunk), '\0');
  int64_t sent = 0;
  while (sent < total) {
    const ssize_t n = pread(fd.get(), data.data(), data.size(), sent);
    if (n <= 0) return Error{"io", "reading the bundle"};
    protocol::JsonWriter u;
    u.begin_object().field("transfer_id", transfer_id).field("offset", sent).key("data");
    u.base64(std::string_view(data.data(), static_cast<size_t>(n))).end_object();
    auto uid = conn.request("workspace.upload", u.str());
    if (!uid) return Error{"transfer_interrupted", uid.error().message};
    auto r = reply_to(conn, *uid);
    if (!r) return r.error();
    if (r->kind == protocol::Message::Kind::kError) return Error{r->error_code, r->error_message};
    if (read_outcome(parser, r->raw, outcome)) {
      if (progress) fmt::print(stderr, "\n");
      return outcome;
    }
    sent += n;
    const auto now = std::chrono::steady_clock::now();
    if (progress && (now - last_shown > std::chrono::milliseconds(200) || sent == total)) {
      show_progress(sent, total, start, sent == total);
      last_shown = now;
    }
  }
  protocol::JsonWriter f;
  f.begin_object().field("transfer_id", transfer_id).field("commit", *commit).field("bundle_bytes", total).end_object();
  auto fid = conn.request("workspace.finish", f.str());
  if (!fid) return Error{"transfer_interrupted", fid.error().message};
  auto r = reply_to(conn, *fid);
  if (!r) return r.error();
  if (r->kind == protocol::Message::Kind::kError) return Error{r->error_code, r->error_message};
  if (!read_outcome(parser, r->raw, outcome)) return Error{"bad_reply", "workspace.finish: no outcome"};
  remember(outcome);
  if (outcome.prepared) collect_cache_if_large(cache);
  return outcome;
}

}  // namespace motor::client
