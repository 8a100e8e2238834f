// workspace.prepare / upload / finish: what the runner answers, and the bundle transfer from
// the first chunk to the checkout (docs/protocol.md "Workspaces").
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
#include "protocol/git_bundle.hpp"
#include "protocol/json_writer.hpp"

namespace motor::workspace {

using namespace detail;

std::optional<Workspaces::Refusal> Workspaces::in_use_refusal(const std::string& caller, const std::string& key) const {
  if (!busy(caller, key) && !jobs_running_(caller, key)) return std::nullopt;
  return Refusal{protocol::RefusalReason::kWorkspaceSetupFailed,
                 "a job or another prepare is using this workspace; try again when it ends", std::nullopt};
}

Workspaces::Reply Workspaces::releasing_mirror(const std::string& mirror, Reply reply) {
  return [this, alive = alive_, mirror, inner = std::move(reply)](Expected<std::string> result) {
    inner(std::move(result));
    if (*alive) release_mirror(mirror);
  };
}

std::string Workspaces::final_reply(const std::string& transfer_id,
                                    const std::optional<Refusal>& refusal, const Record* prepared) const {
  protocol::JsonWriter w;
  // exec-remote/v1: transfer_id is always a UUID (the prepare's, also when no bundle was sent
  // and in refusals); refusal_detail and retry_after_ms are omitted when absent.
  w.begin_object().field("transfer_id", transfer_id);
  if (refusal) {
    w.field_raw("outcome", refusal_json(std::string(protocol::to_wire(refusal->reason))));
    if (!refusal->detail.empty()) w.field("refusal_detail", refusal->detail.substr(0, 1024));
    if (refusal->retry_after_ms) w.field("retry_after_ms", *refusal->retry_after_ms);
  } else {
    w.key("outcome").begin_object().field("type", "prepared").end_object();
  }
  if (prepared) {
    w.field("tree_hash", prepared->tree.tree).field("commit", prepared->tree.commit);
    w.field("bundle_bytes", prepared->tree.bundle_bytes);
    w.field("fetch_ms", prepared->tree.fetch_ms).field("checkout_ms", prepared->tree.checkout_ms);
  }
  w.end_object();
  return w.take();
}

void Workspaces::prepare(uint64_t session, const std::string& caller,
                         const protocol::WorkspaceParams& p, std::string transfer_id,
                         const std::optional<Refusal>& refusal, Reply reply) {
  auto refuse = [&](protocol::RefusalReason reason, std::string detail) {
    reply(final_reply(transfer_id, Refusal{std::move(reason), std::move(detail), std::nullopt}, nullptr));
  };
  if (auto st = validate_workspace_key(p.workspace_key); !st) return refuse(protocol::RefusalReason::kWorkspaceKeyRejected, st.error().message);
  for (const auto& sibling : p.siblings) {
    if (auto st = validate_workspace_key(sibling); !st) return refuse(protocol::RefusalReason::kWorkspaceKeyRejected, st.error().message);
  }
  if (refusal) return reply(final_reply(transfer_id, refusal, nullptr));
  if (p.untrusted && p.screen_base.empty()) {
    return refuse(protocol::RefusalReason::kScreenRefused, "an untrusted prepare names the commit its change is screened from (screen_base)");
  }
  if (p.repository_root.empty() || p.repository_root[0] != '/') {
    return reply(make_error("bad_request", "workspace.prepare needs an absolute repository_root"));
  }
  if (p.tree_hash.empty()) return prepare_to_commit(caller, p, std::move(transfer_id), std::move(reply));
  const std::string k = id_key(caller, p.workspace_key);
  const std::string mirror = mirror_path(caller, p.repository_root);
  // The tree is in the mirror already (the same tree as last time: only the job's changes are
  // undone): no bundle.
  // An untrusted prepare takes this way only if the tree passed the screen from the same base.
  if (auto it = records_.find(k); it != records_.end() && it->second.tree.tree == p.tree_hash && it->second.mirror == mirror &&
                                  (!p.untrusted || it->second.tree.screened_base == p.screen_base)) {
    if (auto used = in_use_refusal(caller, p.workspace_key)) return reply(final_reply(transfer_id, used, nullptr));
    // Untouched since its checkout (the scan after each job found no change and no .git): the
    // checkout would change nothing. An unchanged checkout's `motor run` costs no helper then.
    if (!it->second.dirty) {
      it->second.tree.bundle_bytes = 0;
      it->second.tree.fetch_ms = it->second.tree.checkout_ms = 0;
      return reply(final_reply(transfer_id, std::nullopt, &it->second));
    }
    Record next = it->second;
    next.tree.bundle_bytes = 0;
    next.tree.fetch_ms = 0;
    ++busy_[k];
    return checkout(caller, p.workspace_key, std::move(next), reply_when_checked(transfer_id, std::move(reply)));
  }
  if (prepare_from_sibling(caller, p, mirror, transfer_id, reply)) return;
  auto t = std::make_unique<Transfer>();
  t->id = transfer_id;  // kept: a refusal below names it too
  t->caller = caller;
  t->key = p.workspace_key;
  t->repository_root = p.repository_root;
  t->tree = p.tree_hash;
  if (p.untrusted) t->screen_base = p.screen_base;
  t->session = session;
  t->path = s_.state_dir + "/transfers/" + t->id + ".bundle";
  t->last_activity_ms = uv_now(loop_);
  {
    reactor::SlowCall timed("creating a bundle upload");
    t->fd = UniqueFd(::open(t->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!t->fd || fchown(t->fd.get(), s_.mirror_uid, s_.mirror_gid) < 0) {
      return refuse(protocol::RefusalReason::kWorkspaceSetupFailed, fmt::format("cannot store the upload: {}", std::strerror(errno)));
    }
  }
  // What the runner has, so the client bundles only what is missing: the commits this caller's
  // workspaces of the same repository were prepared to.
  protocol::JsonWriter w;
  w.begin_object().field("transfer_id", t->id).field_null("outcome").key("have").begin_array();
  if (auto own = records_.find(k); own != records_.end() && own->second.mirror == mirror) w.string(own->second.tree.commit);
  for (const auto& [rk, r] : records_) {
    if (rk != k && rk.starts_with(caller + "/") && r.mirror == mirror) w.string(r.tree.commit);
  }
  w.end_array().field("chunk_bytes", static_cast<uint64_t>(kChunkBytes)).field("max_bundle_bytes", s_.max_bundle_bytes);
  w.field("bundle_ref", kBundleRef).end_object();
  transfers_[t->id] = std::move(t);
  reply(w.take());
}

// Another workspace of this caller and repository was prepared to this very tree (a new workspace
// of an unchanged checkout, the common case): its commit is in the mirror, kept there while its
// record names it, so this one is checked out to it with no bundle: none of the client's commit,
// pack and upload, nor the ingest (docs/workspaces.md). An untrusted prepare takes it only from a
// workspace whose tree passed the screen from the same base. The mirror is held (no collection
// meanwhile) until the checkout has answered.
bool Workspaces::prepare_from_sibling(const std::string& caller, const protocol::WorkspaceParams& p,
                                      const std::string& mirror, const std::string& transfer_id, Reply& reply) {
  const std::string k = id_key(caller, p.workspace_key);
  auto sibling = std::find_if(records_.begin(), records_.end(), [&](const auto& entry) {
    const Record& r = entry.second;
    return entry.first != k && entry.first.starts_with(caller + "/") && r.mirror == mirror &&
           r.tree.tree == p.tree_hash && (!p.untrusted || r.tree.screened_base == p.screen_base);
  });
  if (sibling == records_.end()) return false;
  if (auto used = in_use_refusal(caller, p.workspace_key)) {
    reply(final_reply(transfer_id, used, nullptr));
    return true;
  }
  Record next;
  if (auto own = records_.find(k); own != records_.end()) next.git = own->second.git;
  next.mirror = mirror;
  next.tree.repository_root = p.repository_root;
  next.tree.commit = sibling->second.tree.commit;
  next.tree.tree = p.tree_hash;
  if (p.untrusted) next.tree.screened_base = p.screen_base;
  ++busy_[k];
  Reply released = releasing_mirror(mirror, std::move(reply));
  use_mirror(mirror, [this, caller, key = p.workspace_key, next = std::move(next), transfer_id,
                      released = std::move(released)]() mutable {
    checkout(caller, key, std::move(next), reply_when_checked(transfer_id, std::move(released)));
  });
  return true;
}

// exec-remote/v1's prepare names only base_commit: the caller's local side snapshots and syncs,
// and the runner never reads the caller's paths. So the runner prepares the workspace to that
// commit if it holds it already (an earlier bundle of this caller and repository brought it),
// and otherwise answers snapshot_failed: it has no snapshot of it yet (docs/protocol.md).
void Workspaces::prepare_to_commit(const std::string& caller, const protocol::WorkspaceParams& p, std::string transfer_id,
                                   Reply reply) {
  auto refuse = [&](protocol::RefusalReason reason, std::string detail) {
    reply(final_reply(transfer_id, Refusal{std::move(reason), std::move(detail), std::nullopt}, nullptr));
  };
  if (!protocol::is_object_id(p.base_commit)) {
    return refuse(protocol::RefusalReason::kSnapshotFailed, "workspace.prepare needs tree_hash, or base_commit as a full commit id");
  }
  const std::string mirror = mirror_path(caller, p.repository_root);
  struct stat st {};
  if (::stat((mirror + "/HEAD").c_str(), &st) != 0) {
    return refuse(protocol::RefusalReason::kSnapshotFailed, "the runner holds no snapshot of this repository yet: its commits arrive in a bundle "
                                     "(workspace.prepare with tree_hash), sent by the caller's local side");
  }
  // The mirror is held from the commit's lookup until the checkout has answered: a collection
  // meanwhile (another prepare's release) would prune a commit no record names yet.
  Reply released = releasing_mirror(mirror, std::move(reply));
  use_mirror(mirror, [this, caller, p, mirror, transfer_id = std::move(transfer_id), reply = std::move(released)]() mutable {
    find_commit_and_check_out(caller, p, mirror, std::move(transfer_id), std::move(reply));
  });
}

void Workspaces::find_commit_and_check_out(const std::string& caller, const protocol::WorkspaceParams& p,
                                           const std::string& mirror, std::string transfer_id, Reply reply) {
  ChildSpec spec;
  spec.file = s_.git;
  spec.argv = {s_.git, "--git-dir=" + mirror, "rev-parse", "-q", "--verify", p.base_commit + "^{tree}"};
  spec.env = git_env();
  spec.uid = s_.mirror_uid;
  spec.gid = s_.mirror_gid;
  spec.timeout_ms = kScanTimeoutMs;
  spec.max_stdout_bytes = 4096;
  run_child(loop_, std::move(spec), [this, alive = alive_, caller, key = p.workspace_key, root = p.repository_root,
                                     commit = p.base_commit, mirror, transfer_id = std::move(transfer_id),
                                     reply = std::move(reply)](ChildResult r) mutable {
    if (!*alive) return;
    std::string tree = r.out.substr(0, r.out.find('\n'));
    if (!r.ok() || !protocol::is_object_id(tree)) {
      return reply(final_reply(transfer_id,
                               Refusal{protocol::RefusalReason::kSnapshotFailed,
                                       fmt::format("the runner holds no snapshot of commit {} yet: it arrives in a bundle "
                                                   "(workspace.prepare with tree_hash)", commit),
                                       std::nullopt},
                               nullptr));
    }
    if (auto used = in_use_refusal(caller, key)) return reply(final_reply(transfer_id, used, nullptr));
    Record next;
    if (auto it = records_.find(id_key(caller, key)); it != records_.end()) next.git = it->second.git;
    next.mirror = mirror;
    next.tree.repository_root = root;
    next.tree.commit = commit;
    next.tree.tree = std::move(tree);
    ++busy_[id_key(caller, key)];
    checkout(caller, key, std::move(next), reply_when_checked(transfer_id, std::move(reply)));
  });
}

void Workspaces::upload(uint64_t session, const protocol::WorkspaceParams& p, Reply reply) {
  auto it = transfers_.find(p.transfer_id);
  // Another connection's transfer id is treated as unknown: it cannot be continued from here.
  if (it == transfers_.end() || it->second->session != session) {
    return reply(make_error("bad_request", "no such transfer on this connection (it ended or expired)"));
  }
  Transfer& t = *it->second;
  if (!p.offset || *p.offset != t.received) {
    return reply(make_error("bad_request",
                                        fmt::format("params.offset must be {} (the bytes received so far)", t.received)));
  }
  if (t.received + static_cast<int64_t>(p.data.size()) > s_.max_bundle_bytes) {
    const std::string tid = t.id;
    unlink(t.path.c_str());
    transfers_.erase(it);
    return reply(final_reply(tid,
                             Refusal{protocol::RefusalReason::kBundleRejected,
                                     fmt::format("the bundle is over this runner's limit of {} bytes (max_bundle_size); "
                                                 "nothing was changed",
                                                 s_.max_bundle_bytes),
                                     std::nullopt},
                             nullptr));
  }
  {
    reactor::SlowCall timed("writing a bundle chunk");
    size_t done = 0;
    while (done < p.data.size()) {
      const ssize_t n = ::write(t.fd.get(), p.data.data() + done, p.data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string tid = t.id;
        const int err = errno;
        unlink(t.path.c_str());
        transfers_.erase(it);
        const bool full = err == ENOSPC || err == EDQUOT;
        return reply(final_reply(tid,
                                 Refusal{full ? protocol::RefusalReason::kRunnerDiskFull : protocol::RefusalReason::kWorkspaceSetupFailed,
                                         fmt::format("storing the bundle: {}", std::strerror(err)),
                                         full ? std::optional<int64_t>(60000) : std::nullopt},
                                 nullptr));
      }
      done += static_cast<size_t>(n);
    }
  }
  t.received += static_cast<int64_t>(p.data.size());
  t.last_activity_ms = uv_now(loop_);
  reply(fmt::format(R"({{"transfer_id":"{}","received":{}}})", t.id, t.received));
}

void Workspaces::finish(uint64_t session, const std::string& caller, const protocol::WorkspaceParams& p,
                        Reply reply) {
  auto it = transfers_.find(p.transfer_id);
  if (it == transfers_.end() || it->second->session != session) {
    return reply(make_error("bad_request", "no such transfer on this connection (it ended or expired)"));
  }
  std::unique_ptr<Transfer> t = std::move(it->second);
  transfers_.erase(it);
  t->fd.reset();
  auto refuse = [&](protocol::RefusalReason reason, std::string detail) {
    unlink(t->path.c_str());
    reply(final_reply(t->id, Refusal{std::move(reason), std::move(detail), std::nullopt}, nullptr));
  };
  if (!p.bundle_bytes || *p.bundle_bytes != t->received) {
    return refuse(protocol::RefusalReason::kTransferInterrupted, fmt::format("{} bundle bytes arrived, the client announced {}", t->received,
                                                      p.bundle_bytes.value_or(-1)));
  }
  if (p.commit.empty()) return refuse(protocol::RefusalReason::kBundleRejected, "workspace.finish needs the bundle's commit");
  // The header is read here (a bounded read of the runner's own file): its one ref must be the
  // announced commit. The pack behind it goes to index-pack as that process's stdin.
  auto bundle = std::make_shared<UniqueFd>();
  std::string head(protocol::kMaxBundleHeaderBytes, '\0');
  {
    reactor::SlowCall timed("reading a bundle header");
    *bundle = UniqueFd(::open(t->path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    const ssize_t n = *bundle ? ::pread(bundle->get(), head.data(), head.size(), 0) : -1;
    if (n < 0) return refuse(protocol::RefusalReason::kWorkspaceSetupFailed, fmt::format("reading the bundle: {}", std::strerror(errno)));
    head.resize(static_cast<size_t>(n));
  }
  auto header = protocol::parse_bundle_header(head);
  if (!header) return refuse(protocol::RefusalReason::kBundleRejected, header.error().message);
  if (header->refs.size() != 1 || header->refs[0].name != kBundleRef) {
    return refuse(protocol::RefusalReason::kBundleRejected, fmt::format("the bundle must hold exactly one ref, {}", kBundleRef));
  }
  if (header->refs[0].id != p.commit) {
    return refuse(protocol::RefusalReason::kBundleRejected, fmt::format("the bundle holds commit {}, not the announced {}", header->refs[0].id, p.commit));
  }
  if (::lseek(bundle->get(), static_cast<off_t>(header->pack_offset), SEEK_SET) < 0) {
    return refuse(protocol::RefusalReason::kWorkspaceSetupFailed, fmt::format("reading the bundle: {}", std::strerror(errno)));
  }
  if (auto used = in_use_refusal(caller, t->key)) return refuse(used->reason, used->detail);
  ++busy_[id_key(caller, t->key)];
  const std::string mirror = mirror_path(caller, t->repository_root);
  {
    reactor::SlowCall timed("creating a mirror directory");
    if (auto st = ensure_owned_dir(s_.state_dir + "/mirrors/" + caller, 0700, s_.mirror_uid, s_.mirror_gid); !st) {
      settle(id_key(caller, t->key));
      return refuse(protocol::RefusalReason::kWorkspaceSetupFailed, st.error().message);
    }
  }
  ingest_bundle(caller, std::shared_ptr<Transfer>(std::move(t)), p.commit, mirror, std::move(bundle), std::move(reply));
}

// The bundle's pack into the mirror (held meanwhile), then the screen (untrusted) and the checkout.
void Workspaces::ingest_bundle(const std::string& caller, std::shared_ptr<Transfer> shared, std::string commit,
                               std::string mirror, std::shared_ptr<UniqueFd> bundle, Reply reply) {
  // However the prepare ends, the mirror is free again once it has answered.
  reply = releasing_mirror(mirror, std::move(reply));
  use_mirror(mirror, [this, alive = alive_, shared, commit, mirror, caller, bundle, reply = std::move(reply)]() mutable {
    struct stat mirror_head {};
    const bool mirror_exists = ::stat((mirror + "/HEAD").c_str(), &mirror_head) == 0;
    const uint64_t fetch_start = uv_hrtime();
    ingest_pack(mirror, !mirror_exists, bundle, [this, alive, shared, commit, mirror, caller, fetch_start,
                                                  reply = std::move(reply)](ChildResult r) mutable {
      if (!*alive) return;
      unlink(shared->path.c_str());
      const std::string k = id_key(caller, shared->key);
      if (!r.ok()) {
        settle(k);
        // index-pack dies (exit 128) on a corrupt pack, an object fsck rejects, or a link to an
        // object neither in the pack nor in the mirror (a missing prerequisite).
        const auto reason = r.exit_code == 128 ? protocol::RefusalReason::kBundleRejected
                                               : protocol::RefusalReason::kWorkspaceSetupFailed;
        return reply(final_reply(shared->id,
                                 Refusal{reason, "the workspace is unchanged; git: " + r.describe(), std::nullopt}, nullptr));
      }
      Record next;
      if (auto it2 = records_.find(k); it2 != records_.end()) next.git = it2->second.git;
      next.mirror = mirror;
      next.tree.repository_root = shared->repository_root;
      next.tree.commit = commit;
      next.tree.tree = shared->tree;
      next.tree.bundle_bytes = shared->received;
      next.tree.fetch_ms = static_cast<int64_t>((uv_hrtime() - fetch_start) / 1000000);
      if (shared->screen_base.empty()) {
        return checkout(caller, shared->key, std::move(next), reply_when_checked(shared->id, std::move(reply)));
      }
      screen_then_checkout(caller, shared->key, std::move(next), shared->screen_base,
                           reply_when_checked(shared->id, std::move(reply)));
    });
  });
}

Workspaces::Checked Workspaces::reply_when_checked(std::string transfer_id, Reply reply) const {
  return [this, transfer_id = std::move(transfer_id), reply = std::move(reply)](std::optional<Refusal> refusal,
                                                                                const Record* rec) {
    reply(final_reply(transfer_id, refusal, refusal ? nullptr : rec));
  };
}

}  // namespace motor::workspace
