#include "runner/state_store.hpp"

#include <dirent.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include "motor/sys_error.hpp"
#include "protocol/json_writer.hpp"
#include "base/atomic_file.hpp"

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
    if (j.job_id.empty()) return make_error("state", "state.json has a job without a job_id");
    st.jobs.push_back(std::move(j));
  }
  return st;
}

Status save_state(const std::string& state_dir, const PersistedState& state) {
  return write_state_file(state_dir, encode_state(state));
}

Status write_state_file(const std::string& state_dir, std::string_view text) {
  return write_file_atomically(state_dir + "/state.json", text, 0600);
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

Expected<PersistedState> load_state(const std::string& state_dir) {
  const std::string path = state_dir + "/state.json";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return PersistedState{};
    return sys_error("opening " + path);
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return sys_error("reading " + path, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  auto st = decode_state(text);
  if (!st) return make_error("state", path + ": " + st.error().message);
  return st;
}

}  // namespace motor::runner
