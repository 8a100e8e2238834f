#include "client/endpoint_requests.hpp"

#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/job_id.hpp"
#include "client/exit_codes.hpp"
#include "client/git_process.hpp"
#include "client/workspace_sync.hpp"
#include "protocol/json_writer.hpp"

namespace motor::client {
namespace {

using Kind = protocol::Message::Kind;
using protocol::Request;

constexpr int64_t kRetryUnreachableMs = 5000;

// One sync at a time per checkout: two would share its private index and fingerprint.
std::mutex& sync_lock_for(const std::string& root) {
  static std::mutex guard;
  static std::map<std::string, std::mutex> locks;
  std::lock_guard lock(guard);
  return locks[root];
}

std::string new_id() {
  auto id = new_job_id();
  return id ? *id : "00000000-0000-7000-8000-000000000000";
}

void send_error(CallerOutput& out, int64_t id, std::string_view code, std::string_view message) {
  out.send(protocol::encode_error(id, code, message));
}

void relay(CallerOutput& out, const protocol::Message& m, int64_t caller_id) {
  if (auto frame = with_caller_id(m.raw, caller_id)) out.send(*frame);
}

LocalRefusal refusal(std::string reason, std::string detail, std::optional<int64_t> retry_after_ms = std::nullopt) {
  LocalRefusal r;
  r.reason = std::move(reason);
  r.detail = std::move(detail);
  r.retry_after_ms = retry_after_ms;
  return r;
}

// Why the runner could not be used, as a refusal reason and its retry hint.
LocalRefusal refusal_for_connection(const Error& e) {
  if (e.code == kRunnerTooOld) return refusal("runner_version_mismatch", e.message);
  if (exit_code_for_error(e.code) == kExitTransient) {
    return refusal("unreachable", e.message, kRetryUnreachableMs);
  }
  return refusal("unreachable", e.message);
}

// A failed sync as a refusal: the snapshot (git, the checkout) or the transfer.
LocalRefusal refusal_for_sync(const Error& e) {
  if (e.code == "transfer_interrupted") return refusal("transfer_interrupted", e.message, kRetryUnreachableMs);
  if (e.code == "bundle_rejected") return refusal("bundle_rejected", e.message);
  if (e.code == "git" || e.code == "io" || e.code == "not_a_checkout") return refusal("snapshot_failed", e.message);
  if (e.code == "bad_request" || e.code == "internal" || e.code == "bad_reply") {
    return refusal("workspace_setup_failed", fmt::format("the runner refused the sync ({}): {}", e.code, e.message));
  }
  return refusal_for_connection(e);
}

// The caller's workspace_key names the top of a Git checkout on this machine.
Expected<Checkout> checkout_at(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Error{"not_a_checkout", fmt::format("workspace_key \"{}\" is not an absolute path of a checkout on this machine", path)};
  }
  auto c = find_checkout(path);
  if (!c) return c.error();
  if (!c->rel_cwd.empty()) {
    return Error{"not_a_checkout", fmt::format("workspace_key {} is inside the checkout {}, not its top", path, c->root)};
  }
  return c;
}

struct Synced {
  PrepareOutcome outcome;
  std::string root;  // the checkout's top, as git names it
};

// Snapshots the checkout at `key` and prepares its workspace (of that key) on the runner.
Expected<Synced> sync(Connection& conn, const std::string& key, const std::string& repository_root) {
  auto checkout = checkout_at(key);
  if (!checkout) return checkout.error();
  std::lock_guard lock(sync_lock_for(checkout->root));
  PrepareRequest request;
  request.key = key;
  request.repository_root = repository_root;
  auto outcome = prepare_workspace(conn, *checkout, request);
  if (!outcome) return outcome.error();
  return Synced{std::move(*outcome), checkout->root};
}

// A refused prepare, as the refusal of the job that needed it.
LocalRefusal refusal_for_outcome(const PrepareOutcome& o) {
  LocalRefusal r = refusal(o.reason, o.detail);
  r.bundle_bytes = o.bundle_bytes;
  if (!o.unknown_type.empty()) {
    r.reason = "workspace_setup_failed";
    r.detail = "the runner answered the sync with an outcome this endpoint does not know: " + o.unknown_type;
  }
  if (o.transient) r.retry_after_ms = kRetryUnreachableMs;
  if (!o.tree_hash.empty()) r.tree_hash = o.tree_hash;
  return r;
}

struct RunParamsView {
  std::string workspace_key, repository_root, cwd;
  std::vector<std::string> siblings;
};

Expected<RunParamsView> read_run_params(simdjson::dom::object obj) {
  RunParamsView v;
  std::string_view s;
  if (!obj["workspace_key"].get_string().get(s)) v.workspace_key = std::string(s);
  if (!obj["repository_root"].get_string().get(s)) v.repository_root = std::string(s);
  if (!obj["cwd"].get_string().get(s)) v.cwd = std::string(s);
  simdjson::dom::array list;
  if (!obj["siblings"].get_array().get(list)) {
    for (auto item : list) {
      if (item.get_string().get(s)) return Error{"bad_request", "field \"params.siblings\" must hold strings"};
      v.siblings.emplace_back(s);
    }
  }
  return v;
}

// The caller's cwd (absolute on this machine) as a directory relative to the workspace.
Expected<std::string> relative_cwd(const std::string& cwd, const std::string& key, const std::string& root) {
  if (cwd.empty() || cwd[0] != '/') return cwd;
  for (const std::string& top : {root, key}) {
    if (cwd == top) return std::string();
    if (cwd.size() > top.size() && cwd.compare(0, top.size(), top) == 0 && cwd[top.size()] == '/') return cwd.substr(top.size() + 1);
  }
  return Error{"bad_request", fmt::format("cwd {} is not inside the workspace {}", cwd, key)};
}

// The caller's params with `cwd` replaced; every other field as the caller sent it.
std::string with_cwd(simdjson::dom::object obj, const std::string& cwd) {
  protocol::JsonWriter w;
  w.begin_object();
  for (auto [key, value] : obj) {
    if (key != "cwd") w.field_raw(key, simdjson::minify(value));
  }
  w.field("cwd", cwd).end_object();
  return w.take();
}

// Sleeps up to `ms`, in steps, unless the link is cut first.
bool pause_unless_cut(RunnerLink& link, int ms) {
  for (int waited = 0; waited < ms; waited += 50) {
    if (link.is_cut()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return !link.is_cut();
}

// The runner's records of one job stream (`runner_id` on `conn`), passed on under `caller_id`
// to the terminal record. A connection that breaks once the job has an id is made again and the
// job attached from the last seq + 1 (never run twice), as `motor run` does.
void relay_stream(CallerOutput& out, RunnerLink& link, Connection* conn, int64_t runner_id, int64_t caller_id,
                  std::string job_id, int64_t last_seq) {
  int attempts = 0;
  for (;;) {
    auto m = conn->read();
    if (!m) {
      if (link.is_cut() || out.gone()) return;
      if (job_id.empty() || m.error().code != "unreachable" || ++attempts > 40) {
        return send_error(out, caller_id, m.error().code,
                          job_id.empty() ? m.error().message
                                         : fmt::format("{}; the job {} is still the runner's: exec.attach from seq {}",
                                                       m.error().message, job_id, last_seq + 1));
      }
      if (!pause_unless_cut(link, std::min(200 << std::min(attempts, 5), 5000))) return;
      auto again = link.open();
      if (!again) continue;
      conn = *again;
      auto id = conn->request("exec.attach", fmt::format("{{\"job_id\":\"{}\",\"from_seq\":{}}}", job_id, last_seq + 1));
      if (id) runner_id = *id;
      continue;
    }
    if (m->id != runner_id) continue;
    if (m->kind == Kind::kError && m->error == protocol::ErrorCode::kStalled && !job_id.empty()) {
      if (auto id = conn->request("exec.attach", fmt::format("{{\"job_id\":\"{}\",\"from_seq\":{}}}", job_id, last_seq + 1))) runner_id = *id;
      continue;
    }
    relay(out, *m, caller_id);
    if (m->kind == Kind::kError) return;
    if (m->seq > 0) last_seq = std::max(last_seq, m->seq);
    if (m->type == "accepted") job_id = m->job_id;
    if (m->type == "terminal" || out.gone()) return;
  }
}

void serve_run(CallerOutput& out, RunnerLink& link, const Request& req, simdjson::dom::object obj) {
  auto params = read_run_params(obj);
  if (!params) return send_error(out, req.id, "bad_request", params.error().message);
  auto conn = link.open();
  if (!conn) return (void)out.send(refusal_terminal(req.id, new_id(), refusal_for_connection(conn.error())));
  std::string run_params = req.params_json;
  if (!params->workspace_key.empty() && params->workspace_key[0] == '/') {
    // Siblings first: the job mounts them, so each must be prepared when it starts.
    for (const auto& sibling : params->siblings) {
      auto s = sync(**conn, sibling, "");
      if (!s) return (void)out.send(refusal_terminal(req.id, new_id(), refusal_for_sync(s.error())));
      if (!s->outcome.prepared) return (void)out.send(refusal_terminal(req.id, new_id(), refusal_for_outcome(s->outcome)));
    }
    auto s = sync(**conn, params->workspace_key, params->repository_root);
    if (!s) return (void)out.send(refusal_terminal(req.id, new_id(), refusal_for_sync(s.error())));
    if (!s->outcome.prepared) return (void)out.send(refusal_terminal(req.id, new_id(), refusal_for_outcome(s->outcome)));
    auto cwd = relative_cwd(params->cwd, params->workspace_key, s->root);
    if (!cwd) return send_error(out, req.id, cwd.error().code, cwd.error().message);
    run_params = with_cwd(obj, *cwd);
  }
  auto id = (*conn)->request("exec.run", run_params);
  if (!id) return (void)out.send(refusal_terminal(req.id, new_id(), refusal_for_connection(id.error())));
  relay_stream(out, link, *conn, *id, req.id, "", 0);
}

struct PrepareParamsView {
  std::string workspace_key, repository_root, base_commit;
};

Expected<PrepareParamsView> read_prepare_params(simdjson::dom::object obj) {
  PrepareParamsView v;
  std::string_view s;
  if (obj["workspace_key"].get_string().get(s)) return Error{"bad_request", "missing field \"params.workspace_key\""};
  v.workspace_key = std::string(s);
  if (!obj["repository_root"].get_string().get(s)) v.repository_root = std::string(s);
  if (!obj["base_commit"].get_string().get(s)) v.base_commit = std::string(s);
  return v;
}

// The caller's base_commit must be a commit its checkout has: the snapshot is made on it.
Status check_base_commit(const std::string& key, const std::string& base_commit) {
  if (base_commit.empty()) return {};
  auto r = git({"-C", key, "rev-parse", "--verify", "-q", "--end-of-options", base_commit + "^{commit}"});
  if (!r) return r.error();
  if (r->status != 0) return Error{"not_a_checkout", fmt::format("base_commit {} is not a commit of the checkout {}", base_commit, key)};
  return {};
}

// workspace.prepare {workspace_key, repository_root, base_commit, siblings}: the caller sends no
// bundle and no hash; the endpoint snapshots the checkout and does the transfer.
void serve_prepare(CallerOutput& out, RunnerLink& link, const Request& req, simdjson::dom::object obj) {
  auto params = read_prepare_params(obj);
  if (!params) return send_error(out, req.id, "bad_request", params.error().message);
  auto refuse = [&](const LocalRefusal& r) { out.send(refusal_prepare_reply(req.id, new_id(), r)); };
  if (auto checkout = checkout_at(params->workspace_key); !checkout) return refuse(refusal_for_sync(checkout.error()));
  if (auto st = check_base_commit(params->workspace_key, params->base_commit); !st) return refuse(refusal_for_sync(st.error()));
  auto conn = link.open();
  if (!conn) return refuse(refusal_for_connection(conn.error()));
  auto s = sync(**conn, params->workspace_key, params->repository_root);
  if (!s) return refuse(refusal_for_sync(s.error()));
  auto reply = with_caller_id(s->outcome.raw, req.id);
  if (!reply) return send_error(out, req.id, "protocol", reply.error().message);
  out.send(*reply);
}

// Any other method: sent as it is; its reply (or, for exec.attach, its stream: `attach` is its
// params, read as the runner reads them) passed on.
void serve_relayed(CallerOutput& out, RunnerLink& link, const Request& req, const std::optional<protocol::JobRef>& attach) {
  auto conn = link.open();
  if (!conn && req.method == "exec.status") return (void)out.send(unreachable_status_reply(req.id));
  if (!conn) return send_error(out, req.id, conn.error().code, conn.error().message);
  auto id = (*conn)->request(req.method, req.params_json);
  if (!id) return send_error(out, req.id, id.error().code, id.error().message);
  if (attach) return relay_stream(out, link, *conn, *id, req.id, attach->job_id, attach->from_seq - 1);
  for (;;) {
    auto m = (*conn)->read();
    if (!m && req.method == "exec.status") return (void)out.send(unreachable_status_reply(req.id));
    if (!m) return send_error(out, req.id, m.error().code, m.error().message);
    if (m->id != *id || m->kind == Kind::kRecord) continue;
    return relay(out, *m, req.id);
  }
}

}  // namespace

void serve_request(CallerOutput& out, RunnerLink& link, const Request& request) {
  // The params are parsed once here (parse_request checked they are an object).
  simdjson::dom::parser parser;
  if (request.method == "exec.attach") {
    auto ref = protocol::parse_job_ref(parser, request.params_json, true);  // a bad from_seq is refused here
    if (!ref) return send_error(out, request.id, ref.error().code, ref.error().message);
    return serve_relayed(out, link, request, *ref);
  }
  simdjson::dom::object obj;
  if (request.method == "exec.run" || request.method == "workspace.prepare") {
    if (parser.parse(request.params_json).get_object().get(obj)) return send_error(out, request.id, "bad_request", "params must be an object");
  }
  // Motor's operator methods are no part of exec-remote/v1: a caller there never reaches them.
  if (request.method.starts_with("cache.")) {
    return send_error(out, request.id, "bad_request", fmt::format("unknown method \"{}\"", request.method.substr(0, 64)));
  }
  if (request.method == "exec.run") return serve_run(out, link, request, obj);
  if (request.method == "workspace.prepare") return serve_prepare(out, link, request, obj);
  serve_relayed(out, link, request, std::nullopt);
}

}  // namespace motor::client
