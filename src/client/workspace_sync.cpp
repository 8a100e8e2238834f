#include "client/workspace_sync.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "client/checkout_fingerprint.hpp"
#include "client/git_process.hpp"
#include "motor/unique_fd.hpp"
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

// Sends a request and waits for its reply; an error reply becomes the error.
Expected<protocol::Message> call(Connection& conn, std::string_view method, const std::string& params) {
  auto id = conn.request(method, params);
  if (!id && id.error().code != "unreachable") return id.error();  // the runner's refusal of this connection
  if (!id) return Error{"transfer_interrupted", id.error().message};
  auto r = reply_to(conn, *id);
  if (!r) return r.error();
  if (r->kind == protocol::Message::Kind::kError) return Error{r->error_code, r->error_message};
  return r;
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

void show_progress(int64_t sent, int64_t total, std::chrono::steady_clock::time_point start, bool done) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = s > 0 ? static_cast<double>(sent) / s : 0;
  fmt::print(stderr, "\rmotor: sending the workspace: {:.1f} / {:.1f} MiB ({:.1f} MiB/s){}", static_cast<double>(sent) / 1048576.0,
             static_cast<double>(total) / 1048576.0, rate / 1048576.0, done ? "\n" : "");
}

const std::vector<std::string> kFixedIdentity = {
    "GIT_AUTHOR_NAME=motor", "GIT_AUTHOR_EMAIL=motor@localhost", "GIT_AUTHOR_DATE=@0 +0000",
    "GIT_COMMITTER_NAME=motor", "GIT_COMMITTER_EMAIL=motor@localhost", "GIT_COMMITTER_DATE=@0 +0000"};

// The checkout's tree as it is on disk, in the private cache repository.
struct Snapshot {
  std::string cache, private_index, fingerprint, tree;
  bool unchanged = false;  // the fingerprint vouched for the tree: no git ran
  FingerprintStart fp_start;
};

// The private cache repository: objects of synthetic commits, the private index (its stat data
// makes the next `git add` hash only what changed) and the last bundled commits.
Status open_cache(const std::string& cache, const std::string& objects, const std::string& index,
                  const std::string& private_index) {
  if (!file_exists(cache + "/HEAD")) {
    if (auto s = git_ok({"init", "-q", "--bare", cache}); !s) return s.error();
    // gc.auto 0 appended as `git config` writes it, and the alternates: no more processes.
    auto append = [](const std::string& path, std::string_view text, int flags) -> Status {
      UniqueFd f(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644));
      if (!f || write(f.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        return Error{"io", "writing " + path};
      }
      return {};
    };
    if (auto s = append(cache + "/config", "[gc]\n\tauto = 0\n", O_APPEND); !s) return s;
    if (auto s = append(cache + "/objects/info/alternates", objects + "\n", O_TRUNC); !s) return s;
  }
  if (!file_exists(private_index) && file_exists(index)) return copy_file(index, private_index);
  return {};
}

Expected<Snapshot> snapshot(const Checkout& checkout, bool trust_fingerprint) {
  const std::string& objects = checkout.objects_dir;
  const std::string& index = checkout.index_path;
  Snapshot s;
  s.cache = fmt::format("{}/motor/repos/{:016x}.git", cache_base(), path_hash(objects));
  s.private_index = s.cache + "/motor-index";
  if (auto st = open_cache(s.cache, objects, index, s.private_index); !st) return st.error();
  // Nothing changed since the last sync (checkout_fingerprint.hpp): its tree, without git.
  s.fingerprint = fingerprint_path(cache_base(), checkout.root);
  const std::string git_dir = index.substr(0, index.rfind('/'));
  const bool plain_checkout = objects == git_dir + "/objects";  // .git a directory of its own
  // The watcher's answer first: whatever changes after it is an event it reports next time.
  const auto watch = plain_checkout ? checkout_watch_state(checkout.root) : std::nullopt;
  if (trust_fingerprint) {
    if (auto tree = unchanged_tree(s.fingerprint, checkout.root, watch); tree && protocol::is_object_id(*tree)) {
      s.tree = *tree;
      s.unchanged = true;
      return s;
    }
  }
  if (plain_checkout) {
    s.fp_start = begin_fingerprint(checkout.root, git_dir, s.cache);
    s.fp_start.watch = watch;
  }
  const std::vector<std::string> private_env = {"GIT_INDEX_FILE=" + s.private_index, "GIT_OBJECT_DIRECTORY=" + s.cache + "/objects"};
  if (auto st = git_ok({"-C", checkout.root, "add", "-A", "--", "."}, private_env); !st) return st.error();
  auto tree = git_ok({"-C", checkout.root, "write-tree"}, private_env);
  if (!tree) return tree.error();
  s.tree = *tree;
  return s;
}

// Untrusted: the base revision's tree as a parentless commit of its own; the synthetic commit
// gets it as a parent, so the bundle carries what the runner needs to screen the change.
Expected<std::string> screen_base_commit(const Checkout& checkout, const std::string& cache, const std::string& base) {
  auto base_tree = git_ok({"-C", checkout.root, "rev-parse", "--verify", "-q", "--end-of-options", base + "^{tree}"});
  if (!base_tree) return Error{"git", "--base " + base + " is not a revision of this checkout"};
  return git_ok({"--git-dir=" + cache, "commit-tree", *base_tree, "-m", "motor screen base"}, kFixedIdentity);
}

// What the first reply asks for: the transfer and what the runner already has.
struct Wanted {
  std::string transfer_id;
  int64_t chunk = 512 * 1024, max_bundle = INT64_MAX;
  std::vector<std::string> have;
};

Expected<Wanted> read_wanted(simdjson::dom::parser& parser, const std::string& raw) {
  simdjson::dom::element result;
  if (parser.parse(raw)["result"].get(result)) return Error{"bad_reply", "workspace.prepare: no result"};
  std::string_view tid;
  if (result["transfer_id"].get_string().get(tid)) return Error{"bad_reply", "workspace.prepare: no transfer_id"};
  Wanted w;
  w.transfer_id = std::string(tid);
  if (result["chunk_bytes"].get_int64().get(w.chunk)) {}
  if (result["max_bundle_bytes"].get_int64().get(w.max_bundle)) {}
  simdjson::dom::array have_list;
  if (!result["have"].get_array().get(have_list)) {
    for (auto h : have_list) {
      std::string_view c;
      if (!h.get_string().get(c) && protocol::is_object_id(c)) w.have.emplace_back(c);
    }
  }
  return w;
}

// A bundle file that is removed when it goes out of scope.
struct BundleFile {
  std::string path, commit;
  UniqueFd fd;
  int64_t size = 0;
  ~BundleFile() {
    if (!path.empty()) unlink(path.c_str());
  }
};

// The synthetic commit on the runner's `known` commits and the bundle of what it lacks: its header
// written here, the pack by pack-objects (what `git bundle create` does, without its extra process
// and ref walk).
Status write_bundle(const Snapshot& s, const std::string& key, const std::vector<std::string>& known,
                    const std::string& screen_base, BundleFile& b) {
  std::vector<std::string> commit_args = {"--git-dir=" + s.cache, "commit-tree", s.tree, "-m", "motor workspace " + key};
  if (!known.empty()) commit_args.insert(commit_args.end(), {"-p", known.front()});
  if (!screen_base.empty()) commit_args.insert(commit_args.end(), {"-p", screen_base});
  auto commit = git_ok(commit_args, kFixedIdentity);
  if (!commit && s.unchanged) unlink(s.fingerprint.c_str());  // its tree is gone from the cache: the next run syncs in full
  if (!commit) return commit.error();
  b.commit = *commit;
  // The keep ref (what the cache's pruning keeps) is written while the bundle is made and sent.
  auto keep = git({"--git-dir=" + s.cache, "update-ref", "refs/motor/keep/" + key, b.commit}, {}, GitIo{.input = {}, .out_fd = -1, .wait = false});
  struct Reaper {
    pid_t pid;
    ~Reaper() { reap(pid); }
  } keep_reaper{keep ? keep->pid : -1};
  // Unique per prepare: `motor exec-remote` runs several at once.
  static std::atomic<uint64_t> serial{0};
  b.path = fmt::format("{}/motor-{}-{}.bundle", s.cache, getpid(), serial.fetch_add(1));
  b.fd = UniqueFd(open(b.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!b.fd) return Error{"io", fmt::format("writing {}: {}", b.path, std::strerror(errno))};
  const std::string header = protocol::format_bundle_header(b.commit, "refs/motor/synthetic", known);
  if (write(b.fd.get(), header.data(), header.size()) != static_cast<ssize_t>(header.size())) {
    return Error{"io", "writing the bundle " + b.path};
  }
  std::string revs = b.commit + "\n";
  for (const auto& k : known) revs += "^" + k + "\n";
  auto packed = git({"--git-dir=" + s.cache, "pack-objects", "--stdout", "--thin", "--delta-base-offset", "--revs", "-q"}, {},
                    GitIo{.input = revs, .out_fd = b.fd.get(), .wait = true});
  if (!packed) return packed.error();
  if (packed->status != 0) return Error{"git", "git pack-objects failed: " + trimmed(packed->err)};
  struct stat st {};
  if (fstat(b.fd.get(), &st) < 0) return Error{"io", "reading the bundle " + b.path};
  b.size = st.st_size;
  return {};
}

// Sends the bundle in chunks; an outcome before the end (a refusal) is returned at once.
Expected<std::optional<PrepareOutcome>> upload(Connection& conn, simdjson::dom::parser& parser, const Wanted& w,
                                               const BundleFile& b, bool progress) {
  const auto start = std::chrono::steady_clock::now();
  auto last_shown = start;
  std::string data(static_cast<size_t>(w.chunk), '\0');
  for (int64_t sent = 0; sent < b.size;) {
    const ssize_t n = pread(b.fd.get(), data.data(), data.size(), sent);
    if (n <= 0) return Error{"io", "reading the bundle"};
    protocol::JsonWriter u;
    u.begin_object().field("transfer_id", w.transfer_id).field("offset", sent).key("data");
    u.base64(std::string_view(data.data(), static_cast<size_t>(n))).end_object();
    auto r = call(conn, "workspace.upload", u.str());
    if (!r) return r.error();
    if (auto outcome = read_prepare_outcome(parser, r->raw)) {
      if (progress) fmt::print(stderr, "\n");
      return outcome;
    }
    sent += n;
    const auto now = std::chrono::steady_clock::now();
    if (progress && (now - last_shown > std::chrono::milliseconds(200) || sent == b.size)) {
      show_progress(sent, b.size, start, sent == b.size);
      last_shown = now;
    }
  }
  return std::optional<PrepareOutcome>();
}

std::string prepare_params(const Checkout& checkout, const PrepareRequest& req, const std::string& tree,
                           const std::string& screen_base) {
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", req.key);
  w.field("repository_root", req.repository_root.empty() ? checkout.root : req.repository_root).field("tree_hash", tree);
  if (!req.siblings.empty()) {
    w.key("siblings").begin_array();
    for (const auto& s : req.siblings) w.string(s);
    w.end_array();
  }
  if (req.untrusted_base) w.field("untrusted", true).field("screen_base", screen_base);
  w.end_object();
  return w.take();
}

}  // namespace

Expected<PrepareOutcome> prepare_workspace(Connection& conn, const Checkout& checkout, const PrepareRequest& req) {
  auto snap = snapshot(checkout, !req.untrusted_base);
  if (!snap) return snap.error();
  // After a prepare the runner has this tree: the fingerprint vouches for it next time.
  auto remember = [&](const PrepareOutcome& o) {
    if (!snap->unchanged && o.prepared && !req.untrusted_base) {
      save_fingerprint(snap->fingerprint, checkout.root, snap->tree, snap->private_index, snap->fp_start);
    }
  };
  std::string screen_base;
  if (req.untrusted_base) {
    auto base = screen_base_commit(checkout, snap->cache, *req.untrusted_base);
    if (!base) return base.error();
    screen_base = *base;
  }
  simdjson::dom::parser parser;
  auto first = call(conn, "workspace.prepare", prepare_params(checkout, req, snap->tree, screen_base));
  if (!first) return first.error();
  if (auto outcome = read_prepare_outcome(parser, first->raw)) {
    remember(*outcome);
    outcome->unchanged = snap->unchanged;
    return *outcome;
  }
  auto wanted = read_wanted(parser, first->raw);
  if (!wanted) return wanted.error();
  // Prerequisites: what the runner has that we still have; the first becomes the parent, so
  // the pack holds only the objects that differ from it.
  BundleFile bundle;
  if (auto s = write_bundle(*snap, req.key, commits_we_have(snap->cache, checkout.objects_dir, wanted->have), screen_base, bundle); !s) {
    return s.error();
  }
  if (bundle.size > wanted->max_bundle) {
    return Error{"bundle_rejected", fmt::format("the bundle is {} bytes, over the runner's limit of {} bytes "
                                                "(max_bundle_size); nothing was sent",
                                                bundle.size, wanted->max_bundle)};
  }
  auto early = upload(conn, parser, *wanted, bundle, req.progress);
  if (!early) return early.error();
  if (*early) return **early;
  protocol::JsonWriter f;
  f.begin_object().field("transfer_id", wanted->transfer_id).field("commit", bundle.commit).field("bundle_bytes", bundle.size);
  f.end_object();
  auto r = call(conn, "workspace.finish", f.str());
  if (!r) return r.error();
  auto outcome = read_prepare_outcome(parser, r->raw);
  if (!outcome) return Error{"bad_reply", "workspace.finish: no outcome"};
  remember(*outcome);
  if (outcome->prepared) collect_cache_if_large(snap->cache);
  return *outcome;
}

}  // namespace motor::client
