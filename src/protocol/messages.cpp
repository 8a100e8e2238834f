#include "protocol/messages.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "protocol/base64.hpp"
#include "protocol/output_frame.hpp"
#include "protocol/size.hpp"

namespace motor::protocol {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

Error bad(std::string message) { return Error{"bad_request", std::move(message)}; }

const char* type_name(element_type t) {
  switch (t) {
    case element_type::ARRAY: return "an array";
    case element_type::OBJECT: return "an object";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: return "a number";
    case element_type::STRING: return "a string";
    case element_type::BOOL: return "a boolean";
    case element_type::NULL_VALUE: return "null";
  }
  return "something else";
}

// simdjson says only NUMBER_ERROR: find the number it means, and whether it is malformed or a
// valid JSON number out of range (1e400, or an integer past 64 bits that no double holds).
std::string describe_number_error(std::string_view text) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) continue;
    size_t end = i;
    while (end < text.size() && std::string_view("+-0123456789.eE").find(text[end]) != std::string_view::npos) ++end;
    const std::string token(text.substr(i, end - i));
    const std::string shown = token.size() > 40 ? token.substr(0, 40) + "..." : token;
    // JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    size_t k = 0;
    auto digits = [&] {
      const size_t from = k;
      while (k < token.size() && token[k] >= '0' && token[k] <= '9') ++k;
      return k > from;
    };
    bool ok = true;
    if (k < token.size() && token[k] == '-') ++k;
    if (k < token.size() && token[k] == '0') ++k;
    else ok = digits();
    if (ok && k < token.size() && token[k] == '.') {
      ++k;
      ok = digits();
    }
    if (ok && k < token.size() && (token[k] == 'e' || token[k] == 'E')) {
      ++k;
      if (k < token.size() && (token[k] == '+' || token[k] == '-')) ++k;
      ok = digits();
    }
    if (!ok || k != token.size()) return fmt::format("frame is not valid JSON (malformed number {})", shown);
    const double d = std::strtod(token.c_str(), nullptr);
    if (std::isinf(d)) return fmt::format("number {} is out of range (numbers must fit a double)", shown);
    i = end;
  }
  return "frame is not valid JSON (a number is malformed or out of range)";
}

Expected<element> parse_json(simdjson::dom::parser& parser, std::string_view text) {
  element root;
  // simdjson validates UTF-8 for the whole document as part of parsing.
  const auto err = parser.parse(text.data(), text.size()).get(root);
  if (err == simdjson::UTF8_ERROR) return bad("frame is not valid UTF-8");
  if (err == simdjson::NUMBER_ERROR) return bad(describe_number_error(text));
  if (err) return bad(fmt::format("frame is not valid JSON ({})", simdjson::error_message(err)));
  return root;
}

// The first key that occurs twice in one object anywhere under `e`: such a request is refused,
// since readers disagree on which value counts (simdjson takes the first, others the last).
std::optional<std::string> duplicate_key(element e) {
  simdjson::dom::array arr;
  if (!e.get_array().get(arr)) {
    for (element item : arr) {
      if (auto dup = duplicate_key(item)) return dup;
    }
    return std::nullopt;
  }
  object obj;
  if (e.get_object().get(obj)) return std::nullopt;
  std::vector<std::string_view> keys;
  for (auto [key, value] : obj) {
    keys.push_back(key);
    if (auto dup = duplicate_key(value)) return dup;
  }
  std::sort(keys.begin(), keys.end());
  if (auto it = std::adjacent_find(keys.begin(), keys.end()); it != keys.end()) return std::string(it->substr(0, 64));
  return std::nullopt;
}

// A whole number within [min, max]: an integer, or a double without a fraction (JSON does not
// tell 5 from 5.0). The error names the field, what it must be and what it got.
Expected<int64_t> whole_number(element e, std::string_view field, int64_t min, int64_t max) {
  auto shown = [&] {
    std::string text = simdjson::minify(e);
    return text.size() > 40 ? text.substr(0, 40) + "..." : text;
  };
  auto range = [&] {
    return bad(fmt::format("field \"{}\" must be a whole number from {} to {}, got {}", field, min, max, shown()));
  };
  int64_t v = 0;
  switch (e.type()) {
    case element_type::INT64:
      if (e.get_int64().get(v)) return range();
      break;
    case element_type::UINT64:  // past INT64_MAX
      return range();
    case element_type::DOUBLE: {
      double d = 0;
      if (e.get_double().get(d)) return range();
      if (d != std::floor(d)) return bad(fmt::format("field \"{}\" must be a whole number, got {}", field, shown()));
      // 2^63 is the first double past INT64_MAX (which rounds up to it): converting it or
      // anything larger to int64_t is undefined, so the bound is checked as a double first.
      if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return range();
      v = static_cast<int64_t>(d);
      break;
    }
    default:
      return bad(fmt::format("field \"{}\" must be a whole number, got {}", field, type_name(e.type())));
  }
  if (v < min || v > max) return range();
  return v;
}

// Reads typed fields of one object; the first problem becomes the error, naming the field.
class FieldReader {
 public:
  FieldReader(object obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::optional<element> get(std::string_view name) {
    element e;
    if (obj_.at_key(name).get(e)) return std::nullopt;
    if (e.is_null()) return std::nullopt;  // null means absent: every field is nullable
    return e;
  }

  template <typename F>
  void string(std::string_view name, F&& sink, bool required = false) {
    auto e = get(name);
    if (!e) {
      if (required) fail(fmt::format("missing field \"{}{}\"", prefix_, name));
      return;
    }
    std::string_view s;
    if (e->get_string().get(s)) return wrong(name, "a string", *e);
    if (s.find('\0') != std::string_view::npos) return fail(fmt::format("field \"{}{}\" contains a NUL byte", prefix_, name));
    sink(std::string(s));
  }

  void integer(std::string_view name, std::optional<int64_t>& out, int64_t min, int64_t max) {
    auto e = get(name);
    if (!e) return;
    auto v = whole_number(*e, prefix_ + std::string(name), min, max);
    if (!v) return fail(v.error().message);
    out = *v;
  }

  void number(std::string_view name, std::optional<double>& out) {
    auto e = get(name);
    if (!e) return;
    double d = 0;
    if (e->get_double().get(d)) return wrong(name, "a number", *e);
    out = d;
  }

  void boolean(std::string_view name, bool& out) {
    auto e = get(name);
    if (!e) return;
    bool b = false;
    if (e->get_bool().get(b)) return wrong(name, "a boolean", *e);
    out = b;
  }

  void string_list(std::string_view name, std::vector<std::string>& out, size_t max_items) {
    auto e = get(name);
    if (!e) return;
    simdjson::dom::array arr;
    if (e->get_array().get(arr)) return wrong(name, "an array of strings", *e);
    if (arr.size() > max_items) return fail(fmt::format("field \"{}{}\" has more than {} items", prefix_, name, max_items));
    size_t i = 0;
    for (element item : arr) {
      std::string_view s;
      if (item.get_string().get(s)) {
        return fail(fmt::format("field \"{}{}[{}]\" must be a string, got {}", prefix_, name, i, type_name(item.type())));
      }
      if (s.find('\0') != std::string_view::npos) return fail(fmt::format("field \"{}{}[{}]\" contains a NUL byte", prefix_, name, i));
      out.emplace_back(s);
      ++i;
    }
  }

  void fail(std::string message) {
    if (!error_) error_ = bad(std::move(message));
  }
  const std::optional<Error>& error() const { return error_; }

 private:
  void wrong(std::string_view name, const char* want, element e) {
    fail(fmt::format("field \"{}{}\" must be {}, got {}", prefix_, name, want, type_name(e.type())));
  }

  object obj_;
  std::string prefix_;
  std::optional<Error> error_;
};

Expected<object> parse_params_object(simdjson::dom::parser& parser, std::string_view params_json) {
  auto root = parse_json(parser, params_json);
  if (!root) return root.error();
  object obj;
  if (root->get_object().get(obj)) return bad("\"params\" must be an object");
  return obj;
}

Expected<int64_t> parse_size_value(element e) {
  int64_t v = 0;
  std::string_view s;
  if (!e.get_int64().get(v)) {
    if (v <= 0) return bad("field \"params.memory\" must be a positive size");
    return v;
  }
  if (e.get_string().get(s)) return bad("field \"params.memory\" must be bytes or a size like \"512M\"");
  auto size = parse_size(s);
  if (!size) return bad("field \"params.memory\": " + size.error().message);
  if (*size <= 0) return bad("field \"params.memory\" must be a positive size");
  return size;
}

}  // namespace

Expected<Request> parse_request(simdjson::dom::parser& parser, std::string_view payload, std::optional<int64_t>* id_out) {
  auto root = parse_json(parser, payload);
  if (!root) return root.error();
  object obj;
  if (root->get_object().get(obj)) return bad("a request must be a JSON object");
  Request req;
  element id;
  if (obj.at_key("id").get(id)) return bad("missing field \"id\"");
  auto id_value = whole_number(id, "id", INT64_MIN, INT64_MAX);
  if (!id_value) return id_value.error();
  req.id = *id_value;
  if (id_out) *id_out = req.id;
  if (auto dup = duplicate_key(*root)) return bad(fmt::format("key \"{}\" appears twice in one object", *dup));
  element method;
  if (obj.at_key("method").get(method)) return bad("missing field \"method\"");
  std::string_view m;
  if (method.get_string().get(m)) return bad(fmt::format("field \"method\" must be a string, got {}", type_name(method.type())));
  if (m.empty() || m.size() > 64) return bad("field \"method\" must name a method");
  req.method = std::string(m);
  element params;
  if (!obj.at_key("params").get(params) && !params.is_null()) {
    if (params.type() != element_type::OBJECT) return bad(fmt::format("field \"params\" must be an object, got {}", type_name(params.type())));
    req.params_json = simdjson::minify(params);
  }
  return req;
}

Expected<bool> parse_flag(simdjson::dom::parser& parser, std::string_view params_json, std::string_view name) {
  auto obj = parse_params_object(parser, params_json);
  if (!obj) return obj.error();
  FieldReader r(*obj, "params.");
  bool value = false;
  r.boolean(name, value);
  if (r.error()) return *r.error();
  return value;
}

bool is_job_id(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

Expected<RunParams> parse_run_params(simdjson::dom::parser& parser, std::string_view params_json, size_t max_argument_bytes) {
  auto obj = parse_params_object(parser, params_json);
  if (!obj) return obj.error();
  FieldReader r(*obj, "params.");
  RunParams p;
  r.string("workspace_key", [&](std::string s) { p.workspace_key = std::move(s); });
  r.string("repository_root", [&](std::string s) { p.repository_root = std::move(s); });
  r.string("cwd", [&](std::string s) { p.cwd = std::move(s); });
  r.string("command", [&](std::string s) { p.command = std::move(s); });
  r.string_list("argv", p.argv, 65536);
  r.number("weight_hint", p.weight_hint);
  r.integer("timeout", p.timeout_s, 1, int64_t{1} << 40);
  if (!p.timeout_s) r.integer("timeout_s", p.timeout_s, 1, int64_t{1} << 40);
  r.integer("queue_wait_limit_s", p.queue_wait_limit_s, 0, int64_t{1} << 40);
  r.string_list("siblings", p.siblings, 64);
  r.integer("cpus", p.cpus, 1, 4096);
  if (auto mem = r.get("memory")) {
    auto size = parse_size_value(*mem);
    if (!size) r.fail(size.error().message);
    else p.memory_bytes = *size;
  }
  // exec-remote/v1: a string this runner does not know is refused before start, not here.
  r.string("network", [&](std::string s) {
    if (auto v = parse_network(s)) p.network = *v;
    else p.unknown_network = s.substr(0, 256);
  });
  r.string("platform", [&](std::string s) {
    if (auto v = parse_platform(s)) p.platform = *v;
    else p.unknown_platform = s.substr(0, 256);
  });
  r.boolean("direct", p.direct);
  r.boolean("untrusted", p.untrusted);
  r.string("priority", [&](std::string s) {
    if (auto v = parse_priority(s)) p.priority = *v;
    else r.fail("field \"params.priority\" must be \"interactive\" or \"batch\"");
  });
  if (auto env = r.get("env")) {
    object env_obj;
    if (env->get_object().get(env_obj)) {
      r.fail(fmt::format("field \"params.env\" must be an object of strings, got {}", type_name(env->type())));
    } else {
      for (auto [name, value] : env_obj) {
        std::string_view v;
        if (value.get_string().get(v)) {
          r.fail(fmt::format("field \"params.env.{}\" must be a string", std::string(name.substr(0, 64))));
          break;
        }
        p.env.emplace_back(std::string(name), std::string(v));
      }
    }
  }
  if (r.error()) return *r.error();

  if (p.command && !p.argv.empty()) return bad("give either \"command\" or \"argv\", not both");
  if (!p.command && p.argv.empty()) return bad("missing field \"command\" (or \"argv\")");
  if (p.command && p.command->empty()) return bad("field \"command\" is empty");
  if (!p.argv.empty() && p.argv[0].empty()) return bad("field \"argv[0]\" is empty");
  size_t total = p.command ? p.command->size() : 0;
  for (const auto& a : p.argv) total += a.size() + 1;
  for (const auto& [k, v] : p.env) total += k.size() + v.size() + 2;
  if (total > max_argument_bytes) {
    return bad(fmt::format("command, argv and env total {} bytes, over the runner's limit of {} bytes", total, max_argument_bytes));
  }
  return p;
}

Expected<JobRef> parse_job_ref(simdjson::dom::parser& parser, std::string_view params_json, bool job_id_required) {
  auto obj = parse_params_object(parser, params_json);
  if (!obj) return obj.error();
  FieldReader r(*obj, "params.");
  JobRef ref;
  bool given = false;
  r.string("job_id", [&](std::string s) { ref.job_id = std::move(s); given = true; }, job_id_required);
  std::optional<int64_t> from;
  r.integer("from_seq", from, 1, INT64_MAX);
  r.string("secret", [&](std::string s) { ref.secret = std::move(s); });
  if (r.error()) return *r.error();
  if (from) ref.from_seq = *from;
  if (ref.secret && ref.secret->size() > 256) return bad("field \"params.secret\" is too long");
  // Only absence (or null) is optional: an empty string is not a job id.
  if (given && !is_job_id(ref.job_id)) {
    return bad("field \"params.job_id\" is not a job id (a lowercase UUID)");
  }
  return ref;
}

bool is_object_id(std::string_view t) {
  if (t.size() != 40 && t.size() != 64) return false;
  return std::all_of(t.begin(), t.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Expected<WorkspaceParams> parse_workspace_params(simdjson::dom::parser& parser, std::string_view params_json) {
  auto obj = parse_params_object(parser, params_json);
  if (!obj) return obj.error();
  FieldReader r(*obj, "params.");
  WorkspaceParams p;
  std::string data;
  r.string("workspace_key", [&](std::string s) { p.workspace_key = std::move(s); });
  r.string("repository_root", [&](std::string s) { p.repository_root = std::move(s); });
  r.string("tree_hash", [&](std::string s) { p.tree_hash = std::move(s); });
  r.string("base_commit", [&](std::string s) { p.base_commit = std::move(s); });
  r.string_list("siblings", p.siblings, 64);
  r.string("transfer_id", [&](std::string s) { p.transfer_id = std::move(s); });
  r.integer("offset", p.offset, 0, INT64_MAX);
  r.string("data", [&](std::string s) { data = std::move(s); });
  r.string("commit", [&](std::string s) { p.commit = std::move(s); });
  r.integer("bundle_bytes", p.bundle_bytes, 0, INT64_MAX);
  r.boolean("untrusted", p.untrusted);
  r.string("screen_base", [&](std::string s) { p.screen_base = std::move(s); });
  if (r.error()) return *r.error();
  if (!p.screen_base.empty() && !is_object_id(p.screen_base)) return bad("field \"params.screen_base\" is not a git object id");
  if (p.repository_root.size() > 4096 || p.repository_root.find('\n') != std::string::npos) {
    return bad("field \"params.repository_root\" must be one line of at most 4096 bytes");
  }
  if (!p.tree_hash.empty() && !is_object_id(p.tree_hash)) return bad("field \"params.tree_hash\" is not a git object id");
  if (!p.commit.empty() && !is_object_id(p.commit)) return bad("field \"params.commit\" is not a git object id");
  if (!p.transfer_id.empty() && !is_job_id(p.transfer_id)) return bad("field \"params.transfer_id\" is not a transfer id");
  if (!data.empty()) {
    auto bytes = base64_decode(data);
    if (!bytes) return bad("field \"params.data\" is not standard padded base64");
    p.data = std::move(*bytes);
  }
  return p;
}

Expected<std::string> parse_identify(simdjson::dom::parser& parser, std::string_view params_json) {
  auto obj = parse_params_object(parser, params_json);
  if (!obj) return obj.error();
  FieldReader r(*obj, "params.");
  std::string caller;
  r.string("caller", [&](std::string s) { caller = std::move(s); }, true);
  if (r.error()) return *r.error();
  if (caller.empty() || caller.size() > 64) return bad("field \"params.caller\" must be 1 to 64 characters");
  for (char c : caller) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '@')) {
      return bad("field \"params.caller\" may hold only letters, digits and - _ . @");
    }
  }
  return caller;
}

std::string encode_result(int64_t id, std::string_view result_json) {
  return fmt::format("{{\"id\":{},\"result\":{}}}", id, result_json);
}

std::string encode_error(std::optional<int64_t> id, std::string_view code, std::string_view message) {
  JsonWriter w;
  w.begin_object();
  if (id) w.field("id", *id);
  else w.field_null("id");
  w.key("error").begin_object().field("code", code).field("message", message).end_object();
  w.end_object();
  return w.take();
}

std::string with_request_id(int64_t id, std::string_view record_json) {
  // record_json always starts with '{' followed by at least one field.
  return fmt::format("{{\"id\":{},{}", id, record_json.substr(1));
}

std::string_view to_wire(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Kind::kExit: return "exit";
    case Outcome::Kind::kSignal: return "signal";
    case Outcome::Kind::kCancelled: return "cancelled";
    case Outcome::Kind::kRefusedBeforeStart: return "refused_before_start";
    case Outcome::Kind::kOutcomeUnknown: return "outcome_unknown";
    case Outcome::Kind::kHistoryExpired: return "history_expired";
  }
  return "outcome_unknown";
}

void write_outcome(JsonWriter& w, const Outcome& o) {
  w.begin_object();
  switch (o.kind) {
    case Outcome::Kind::kExit: w.field("type", "exit").field("code", o.code); break;
    case Outcome::Kind::kSignal: w.field("type", "signal").field("signal", o.signal); break;
    case Outcome::Kind::kCancelled: w.field("type", "cancelled"); break;
    case Outcome::Kind::kRefusedBeforeStart: w.field("type", "refused_before_start").field("reason", o.reason); break;
    case Outcome::Kind::kOutcomeUnknown: w.field("type", "outcome_unknown"); break;
    case Outcome::Kind::kHistoryExpired: w.field("type", "history_expired"); break;
  }
  w.end_object();
}

Expected<Outcome> parse_outcome(element e) {
  object obj;
  if (e.get_object().get(obj)) return bad("\"outcome\" must be an object");
  std::string_view type;
  if (obj.at_key("type").get_string().get(type)) return bad("\"outcome.type\" is missing");
  Outcome o;
  int64_t n = 0;
  if (type == "exit") {
    o.kind = Outcome::Kind::kExit;
    if (obj.at_key("code").get_int64().get(n)) return bad("\"outcome.code\" is missing");
    o.code = static_cast<int>(n);
  } else if (type == "signal") {
    o.kind = Outcome::Kind::kSignal;
    if (obj.at_key("signal").get_int64().get(n)) return bad("\"outcome.signal\" is missing");
    o.signal = static_cast<int>(n);
  } else if (type == "cancelled") {
    o.kind = Outcome::Kind::kCancelled;
  } else if (type == "refused_before_start") {
    o.kind = Outcome::Kind::kRefusedBeforeStart;
    std::string_view reason;
    if (!obj.at_key("reason").get_string().get(reason)) {
      o.reason = std::string(reason);
      o.refusal = parse_refusal_reason(reason);
    }
  } else if (type == "history_expired") {
    o.kind = Outcome::Kind::kHistoryExpired;
  } else {
    o.kind = Outcome::Kind::kOutcomeUnknown;  // outcome_unknown, and any kind we do not know
  }
  return o;
}

Outcome refused(RefusalReason reason) {
  Outcome o;
  o.kind = Outcome::Kind::kRefusedBeforeStart;
  o.reason = std::string(to_wire(reason));
  o.refusal = reason;
  return o;
}

bool is_transient_refusal(std::string_view reason) {
  return reason == "runner_draining" || reason == "runner_disk_full" || reason == "runner_full" ||
         reason == "unreachable" || reason == "queue_wait_exceeded" || reason == "transfer_interrupted";
}

std::string encode_accepted(const AcceptedRecord& r) {
  JsonWriter w;
  w.begin_object().field("type", "accepted").field("job_id", r.job_id).field("queue_position", r.queue_position);
  w.key("env_not_forwarded").begin_array();
  for (const auto& n : r.env_not_forwarded) w.string(n);
  w.end_array();
  // Always the platform it will use; the network only when access was granted (offline is the
  // absence of the field in exec-remote/v1).
  w.field("platform", to_wire(r.platform));
  if (r.network == Network::kOutbound) w.field("network", to_wire(r.network));
  if (r.secret) w.field("secret", *r.secret);
  w.end_object();
  return w.take();
}

std::string encode_started(int64_t seq, int64_t queue_wait_ms, int64_t started_at_ms) {
  return fmt::format("{{\"type\":\"started\",\"seq\":{},\"queue_wait_ms\":{},\"started_at_ms\":{}}}", seq, queue_wait_ms,
                     started_at_ms);
}

std::string encode_output(int64_t seq, std::string_view stream, std::string_view bytes, std::optional<int64_t> truncated_before_seq) {
  std::string out;
  append_json_output(out, OutputHead{std::nullopt, seq, stream, truncated_before_seq}, bytes);
  return out;
}

std::string encode_terminal(const TerminalRecord& r) {
  JsonWriter w;
  w.begin_object().field("type", "terminal").field("job_id", r.job_id).field("seq", r.seq);
  w.key("outcome");
  write_outcome(w, r.outcome);
  if (r.killed) w.field("killed", to_wire(*r.killed));
  if (r.pipestatus) {
    w.key("pipestatus").begin_array();
    for (int status : *r.pipestatus) w.number(status);
    w.end_array();
  }
  w.field("wall_ms", r.wall_ms).field("queue_wait_ms", r.queue_wait_ms);
  w.field("bundle_bytes", r.bundle_bytes);
  if (r.ran) w.field("ran", to_wire(*r.ran));
  else w.field_null("ran");
  w.field("tree_hash", r.tree_hash);
  // The workspace report (src/workspace/change_report.hpp): workspace_changes null = not
  // computed (always sent); the three reports are omitted when not reported.
  if (r.workspace) {
    w.field_raw("workspace_changes", r.workspace->changes);
    if (r.workspace->changes_truncated) w.field("workspace_changes_truncated", true);
    for (const auto& [key, value] : {std::pair<std::string_view, const std::string&>{"untracked_files", r.workspace->untracked_files},
                                     {"ignored_writes", r.workspace->ignored_writes},
                                     {"git_state_changed", r.workspace->git_state_changed}}) {
      if (value != "null") w.field_raw(key, value);
    }
  } else {
    w.field_null("workspace_changes");
  }
  if (r.refusal_detail) w.field("refusal_detail", *r.refusal_detail);
  if (r.retry_after_ms) w.field("retry_after_ms", *r.retry_after_ms);
  w.field("oom_killed", r.oom_killed).field("platform", to_wire(r.platform)).field("network", to_wire(r.network));
  if (!r.cpus.empty()) w.field("cpus", r.cpus).field("cpus_shared", r.cpus_shared);
  if (r.cpu_user_us || r.memory_peak_bytes) {
    w.key("resource_usage").begin_object().field("cpu_user_us", r.cpu_user_us).field("cpu_system_us", r.cpu_system_us);
    w.field("memory_peak_bytes", r.memory_peak_bytes).end_object();
  }
  w.end_object();
  return w.take();
}

Expected<Message> parse_message(simdjson::dom::parser& parser, std::string_view payload) {
  // A binary output frame (ext): a JSON header, then its raw bytes (protocol/output_frame.hpp);
  // the Message's `raw` is then that header.
  std::optional<std::string_view> raw_bytes;
  if (!payload.empty() && payload[0] == kBinaryFrameMark) {
    auto parts = split_binary_frame(payload);
    if (!parts) return bad(parts.error().message);
    payload = parts->first;
    raw_bytes = parts->second;
  }
  auto root = parse_json(parser, payload);
  if (!root) return root.error();
  object obj;
  if (root->get_object().get(obj)) return bad("a message must be a JSON object");
  // Only an output record travels as a binary frame (found by fuzz_client_stream: an error or a
  // result header was read as one, its bytes dropped).
  if (raw_bytes && (obj.at_key("error").error() != simdjson::NO_SUCH_FIELD || obj.at_key("result").error() != simdjson::NO_SUCH_FIELD)) {
    return bad("a binary frame that is not an output record");
  }
  Message m;
  m.raw = std::string(payload);
  int64_t id = 0;
  if (!obj.at_key("id").get_int64().get(id)) m.id = id;
  element e;
  if (!obj.at_key("error").get(e)) {
    m.kind = Message::Kind::kError;
    std::string_view s;
    // Found by fuzz_client_stream: without a code the client printed "motor: : " and exited 70.
    if (e.at_key("code").get_string().get(s) || s.empty()) return bad("error reply without \"code\"");
    m.error_code = std::string(s);
    m.error = parse_error_code(s);
    if (!e.at_key("message").get_string().get(s)) m.error_message = std::string(s);
    return m;
  }
  if (!obj.at_key("result").get(e)) {
    m.kind = Message::Kind::kResult;
    return m;
  }
  std::string_view type;
  if (obj.at_key("type").get_string().get(type)) return bad("a message has neither \"result\", \"error\" nor \"type\"");
  m.kind = Message::Kind::kRecord;
  m.type = std::string(type);
  // A present seq is a u64 (exec-remote/v1): anything else, null included, is a decode error,
  // never seq 0 (a resume cursor must not move back).
  if (element seq; !obj.at_key("seq").get(seq)) {
    auto v = whole_number(seq, "seq", 0, INT64_MAX);
    if (!v) return v.error();
    m.seq = *v;
  }
  std::string_view s;
  if (!obj.at_key("job_id").get_string().get(s)) m.job_id = std::string(s);
  if (raw_bytes && m.type != "output") return bad("a binary frame that is not an output record");
  if (m.type == "output") {
    // A stream label this version does not know is kept (exec-remote/v1: deliver its bytes and
    // seq); the client decides where such bytes go (never to its stdout).
    if (obj.at_key("stream").get_string().get(s)) return bad("output record without \"stream\"");
    m.stream = std::string(s);
    if (raw_bytes) {
      m.bytes = std::string(*raw_bytes);
      return m;
    }
    if (obj.at_key("bytes").get_string().get(s)) return bad("output record without \"bytes\"");
    auto bytes = base64_decode(s);
    if (!bytes) return bad("output record whose \"bytes\" is not base64");
    m.bytes = std::move(*bytes);
  } else if (m.type == "terminal") {
    if (obj.at_key("outcome").get(e)) return bad("terminal record without \"outcome\"");
    auto o = parse_outcome(e);
    if (!o) return o.error();
    m.outcome = *o;
    if (!e.at_key("type").get_string().get(s)) m.outcome_type = std::string(s);
    if (!obj.at_key("killed").get_string().get(s)) m.killed = std::string(s);
    if (!obj.at_key("refusal_detail").get_string().get(s)) m.refusal_detail = std::string(s);
    // Absent (or null) means no hint: the key's presence, not a null test, says "transient".
    if (int64_t hint = 0; !obj.at_key("retry_after_ms").get_int64().get(hint) && hint >= 0) m.retry_after_ms = hint;
  }
  return m;
}

}  // namespace motor::protocol
