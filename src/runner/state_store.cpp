#include "runner/state_store.hpp"

#include <dirent.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include "motor/sys_error.hpp"
#include "protocol/json_writer.hpp"

namespace motor::runner {

std::string encode_job(const PersistedJob& j) {
  protocol::JsonWriter w;
  w.begin_object()
      .field("job_id", j.job_id)
      .field("caller", j.caller)
      .field("workspace_key", j.workspace_key)
      .field("summary", j.summary)
      .field("state", to_wire(j.state))
      .field("cgroup", j.cgroup)
      .field("created_at_ms", j.created_at_ms)
      .field("started_at_ms", j.started_at_ms);
  if (!j.secret_sha256.empty()) w.field("secret_sha256", j.secret_sha256);
  if (j.terminal_json.empty()) w.field_null("terminal");
  else w.field_raw("terminal", j.terminal_json);
  w.end_object();
  return w.take();
}

std::string encode_state(const PersistedState& state) {
  protocol::JsonWriter w;
  w.begin_object().field("version", 1).field("draining", state.draining);
  w.key("jobs").begin_array();
  for (const auto& j : state.jobs) w.raw(j.encoded.empty() ? encode_job(j) : j.encoded);
  w.end_array().end_object();
  std::string out = w.take();
  out.push_back('\n');
  return out;
}

namespace {

// One job object of state.json or of a change; an error if it has no job_id.
Expected<PersistedJob> decode_job(simdjson::dom::element e, std::string_view where) {
  PersistedJob j;
  auto str = [&](const char* key, std::string& out) {
    std::string_view s;
    if (!e[key].get_string().get(s)) out = std::string(s);
  };
  str("job_id", j.job_id);
  str("caller", j.caller);
  str("workspace_key", j.workspace_key);
  str("summary", j.summary);
  std::string state;
  str("state", state);
  j.state = parse_job_state(state);
  str("cgroup", j.cgroup);
  str("secret_sha256", j.secret_sha256);
  int64_t n = 0;
  if (!e["created_at_ms"].get_int64().get(n)) j.created_at_ms = n;
  if (!e["started_at_ms"].get_int64().get(n)) j.started_at_ms = n;
  simdjson::dom::element t;
  if (!e["terminal"].get(t) && !t.is_null()) j.terminal_json = simdjson::minify(t);
  if (j.job_id.empty()) return make_error("state", fmt::format("{} has a job without a job_id", where));
  return j;
}

}  // namespace

Expected<PersistedState> decode_state(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root)) {
    return make_error("state", std::string("state.json is not valid JSON: ") + simdjson::error_message(err));
  }
  // A state.json this runner does not know how to read (written by a newer runner, or not a
  // state file at all) is refused: reading it as version 1 could drop or misread jobs.
  int64_t version = 0;
  if (root["version"].get_int64().get(version)) {
    return make_error("state", "state.json has no whole-number \"version\"; this runner reads version 1");
  }
  if (version != 1) {
    return make_error("state", fmt::format("state.json is version {}; this runner reads version 1 only (was it written "
                                           "by a newer motor-runner? run that version, or move the state directory aside)",
                                           version));
  }
  PersistedState st;
  bool draining = false;
  if (!root["draining"].get_bool().get(draining)) st.draining = draining;
  simdjson::dom::array jobs;
  if (root["jobs"].get_array().get(jobs)) return make_error("state", "state.json has no \"jobs\" list");
  for (simdjson::dom::element e : jobs) {
    auto j = decode_job(e, "state.json");
    if (!j) return j.error();
    st.jobs.push_back(std::move(*j));
  }
  return st;
}

std::string encode_change(bool draining, const std::vector<std::string>& encoded_jobs,
                          const std::vector<std::string>& removed) {
  protocol::JsonWriter w;
  w.begin_object().field("draining", draining);
  w.key("jobs").begin_array();
  for (const auto& j : encoded_jobs) w.raw(j);
  w.end_array();
  w.key("removed").begin_array();
  for (const auto& id : removed) w.string(id);
  w.end_array().end_object();
  return w.take();
}

std::string join_changes(const std::vector<std::string>& changes) {
  size_t n = 2;
  for (const auto& c : changes) n += c.size() + 1;
  std::string out;
  out.reserve(n);
  out.push_back('[');
  for (size_t i = 0; i < changes.size(); ++i) {
    if (i) out.push_back(',');
    out += changes[i];
  }
  out.push_back(']');
  return out;
}

Expected<std::vector<StateChange>> decode_changes(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root)) {
    return make_error("state", std::string("a state change is not valid JSON: ") + simdjson::error_message(err));
  }
  simdjson::dom::array list;
  if (root.get_array().get(list)) return make_error("state", "state changes are not a list");
  std::vector<StateChange> out;
  for (simdjson::dom::element c : list) {
    StateChange ch;
    simdjson::dom::array jobs, removed;
    if (c["draining"].get_bool().get(ch.draining) || c["jobs"].get_array().get(jobs) ||
        c["removed"].get_array().get(removed)) {
      return make_error("state", "a state change needs \"draining\", \"jobs\" and \"removed\"");
    }
    for (simdjson::dom::element e : jobs) {
      auto j = decode_job(e, "a state change");
      if (!j) return j.error();
      ch.jobs.push_back(std::move(*j));
    }
    for (simdjson::dom::element e : removed) {
      std::string_view id;
      if (e.get_string().get(id) || id.empty()) return make_error("state", "a state change removes a job without an id");
      ch.removed.emplace_back(id);
    }
    out.push_back(std::move(ch));
  }
  return out;
}

void remove_interrupted_saves(const std::string& state_dir) {
  DIR* d = opendir(state_dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    // write_file_atomically's temp names: "." + "state.json" + "." + six mkostemp characters.
    const std::string_view name(e->d_name);
    if (name.size() == 18 && name.starts_with(".state.json.")) unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

}  // namespace motor::runner
