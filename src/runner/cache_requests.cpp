// cache.status and cache.clear (`motor cache status|clear`, docs/compile-cache.md): the
// operator's (root, or the runner's own account) view of every caller's compile cache, and its
// removal. Motor's own methods: exec-remote/v1 has none of them and its endpoint relays neither.
#include <fmt/format.h>
#include <simdjson.h>

#include "base/log.hpp"
#include "runner/runner.hpp"
#include "runner/session.hpp"

namespace motor::runner {
namespace {

using protocol::JsonWriter;

// params.repository_root: absent or null = every repository.
Expected<std::optional<std::string>> parse_clear_params(simdjson::dom::parser& parser, std::string_view params_json) {
  simdjson::dom::element root;
  if (parser.parse(params_json.data(), params_json.size()).get(root)) return Error{"bad_request", "params must be an object"};
  simdjson::dom::element field;
  if (root["repository_root"].get(field) || field.is_null()) return std::optional<std::string>{};
  std::string_view value;
  if (field.get_string().get(value) || value.empty()) {
    return Error{"bad_request", R"(field "params.repository_root" must be a repository's path)"};
  }
  return std::optional<std::string>{std::string(value)};
}

}  // namespace

bool Runner::refuse_unless_operator(Session& session, const protocol::Request& r) {
  if (session.privileged()) return false;
  session.send(protocol::encode_error(
      r.id, "unauthorized",
      fmt::format("{} is the operator's (root or the runner's account on the build host); a caller may not use it",
                  r.method)));
  return true;
}

void Runner::handle_cache_status(Session& session, const protocol::Request& r) {
  if (refuse_unless_operator(session, r)) return;
  // Measured now (a sweep, which also applies the limits), answered once that has ended.
  session.owe_reply();
  sweep_cache([this, sid = session.id(), id = r.id] {
    Session* s = find_session(sid);
    if (!s) return;
    s->reply_paid();
    JsonWriter w;
    write_cache_status(w, unix_now_ms());
    s->send(protocol::encode_result(id, w.str()));
  });
}

void Runner::write_cache_status(JsonWriter& w, int64_t now) const {
  std::map<std::string, int64_t> bytes_at;
  int64_t fill = 0, target = 0, shared = 0;
  for (const MeasuredPath& m : cache_measured_) {
    bytes_at[m.path] = m.bytes;
    (m.path.starts_with("/") ? shared : m.path.starts_with("fills/") ? fill : target) += m.bytes;
  }
  int64_t listed = 0;
  w.begin_object().key("repositories").begin_array();
  for (const auto& [name, f] : cache_fills_.repositories()) {
    const int64_t fill_bytes = bytes_at["fills/" + name];
    const int64_t target_bytes = f.published_commit.empty() ? 0 : bytes_at["targets/" + name + "." + f.published_commit];
    listed += fill_bytes + target_bytes;
    w.begin_object().field("caller", f.caller).field("repository_root", f.repository_root);
    if (f.published_commit.empty()) w.field_null("published_commit").field_null("warm_target_age_s");
    else w.field("published_commit", f.published_commit).field("warm_target_age_s", std::max<int64_t>(0, (now - f.published_at_ms) / 1000));
    if (f.last) w.field("last_rebuild_result", result_name(*f.last));
    else w.field_null("last_rebuild_result");
    if (f.last_used_ms > 0) w.field("last_used_age_s", std::max<int64_t>(0, (now - f.last_used_ms) / 1000));
    else w.field_null("last_used_age_s");
    w.field("fill_bytes", fill_bytes).field("target_bytes", target_bytes).field("bytes", fill_bytes + target_bytes);
    w.field("in_use", cache_in_use(name, f)).end_object();
  }
  w.end_array();
  w.key("totals").begin_object().field("fill_bytes", fill).field("target_bytes", target);
  w.field("leftover_bytes", fill + target - listed).field("shared_bytes", shared).end_object();
  w.key("limits").begin_object().field("max_bytes", config_.cache_max_bytes).field("max_age_s", config_.cache_max_age_s);
  w.field("sweep_interval_s", config_.cache_sweep_interval_s).end_object();
  w.field("measured_at_ms", cache_measured_at_ms_).end_object();
}

void Runner::handle_cache_clear(Session& session, const protocol::Request& r) {
  if (refuse_unless_operator(session, r)) return;
  auto only = parse_clear_params(*parser_, r.params_json);
  if (!only) return session.send(protocol::encode_error(r.id, only.error().code, only.error().message));
  std::vector<std::string> names;
  for (const auto& [name, f] : cache_fills_.repositories()) {
    if (*only && f.repository_root != **only) continue;
    // Refused, not waited for: a fill runs up to max_timeout_s, and cancelling it is the caller's call.
    if (cache_in_use(name, f)) {
      return session.send(protocol::encode_error(
          r.id, "cache_busy",
          f.building_job.empty()
              ? fmt::format("the warm target of {} is in use by a workspace or job; try again once it ends", f.repository_root)
              : fmt::format("a fill of {} is queued or running (job {}); try again once it ends, or cancel it",
                            f.repository_root, f.building_job)));
    }
    names.push_back(name);
  }
  if (*only && names.empty()) {
    return session.send(protocol::encode_error(r.id, "bad_request", fmt::format("no compile cache for repository {}", **only)));
  }
  JsonWriter w;
  w.begin_object().key("cleared").begin_array();
  for (const std::string& name : names) {
    const RepositoryFill& f = cache_fills_.repositories().at(name);
    w.begin_object().field("caller", f.caller).field("repository_root", f.repository_root).end_object();
    clear_cache_of(name);
  }
  w.end_array().end_object();
  log_info("compile cache: {} repositories cleared by {}", names.size(), session.caller());
  session.send(protocol::encode_result(r.id, w.str()));
}

void Runner::clear_cache_of(const std::string& name) {
  const RepositoryFill f = cache_fills_.repositories().at(name);
  std::vector<CacheItem> items(f.published_commit.empty() ? 1 : 2);
  items[0].path = "fills/" + name;
  if (items.size() == 2) {
    items[1].path = "targets/" + name + "." + f.published_commit;
    items[1].kind = CacheItemKind::kTarget;
    items[1].newest_target = true;
  }
  for (CacheItem& item : items) {
    item.name = name;
    for (const MeasuredPath& m : cache_measured_) {
      if (m.path == item.path) item.bytes = m.bytes;
    }
    if (evict_cache_item(item)) metrics_.cache_evicted("clear", item.bytes);
  }
  cache_fills_.forget_build(name);  // also when nothing was published: exec.status shows it never built
}

void Runner::warm_target_gone(const std::string& name) {
  auto it = cache_fills_.repositories().find(name);
  if (it != cache_fills_.repositories().end() && workspaces_) {
    workspaces_->warm_target_changed(it->second.caller, it->second.repository_root);  // its spare goes too
  }
}

}  // namespace motor::runner
