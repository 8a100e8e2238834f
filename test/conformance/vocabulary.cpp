#include "conformance/vocabulary.hpp"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "protocol/json_writer.hpp"

namespace motor::test::vocabulary {
namespace {

std::string fixtures_dir() { return std::string(MOTOR_SOURCE_DIR) + "/test/conformance/fixtures"; }

void write_canonical(simdjson::dom::element e, std::string& out) {
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT: {
      std::map<std::string, simdjson::dom::element> sorted;
      simdjson::dom::object obj;
      if (e.get_object().get(obj)) return;
      for (auto [k, v] : obj) sorted.emplace(std::string(k), v);
      out.push_back('{');
      bool first = true;
      for (const auto& [k, v] : sorted) {
        if (!first) out.push_back(',');
        first = false;
        protocol::append_json_string(out, k);
        out.push_back(':');
        write_canonical(v, out);
      }
      out.push_back('}');
      return;
    }
    case simdjson::dom::element_type::ARRAY: {
      out.push_back('[');
      bool first = true;
      simdjson::dom::array arr;
      if (e.get_array().get(arr)) return;
      for (auto item : arr) {
        if (!first) out.push_back(',');
        first = false;
        write_canonical(item, out);
      }
      out.push_back(']');
      return;
    }
    default: out += simdjson::minify(e);
  }
}

std::string type_of(simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT: return "object";
    case simdjson::dom::element_type::ARRAY: return "array";
    case simdjson::dom::element_type::STRING: return "string";
    case simdjson::dom::element_type::BOOL: return "bool";
    case simdjson::dom::element_type::NULL_VALUE: return "null";
    default: return "number";
  }
}

std::string difference(simdjson::dom::element a, simdjson::dom::element x, const std::string& at,
                       const std::set<std::string>& only) {
  if (type_of(a) != type_of(x)) return at + ": " + type_of(a) + " where the vocabulary has " + type_of(x);
  if (x.type() == simdjson::dom::element_type::OBJECT) {
    std::set<std::string> ak, xk;
    simdjson::dom::object ao, xo;
    if (a.get_object().get(ao) || x.get_object().get(xo)) return at + ": not an object";
    for (auto [k, v] : ao) {
      if (only.empty() || only.count(std::string(k))) ak.emplace(k);
    }
    for (auto [k, v] : xo) xk.emplace(k);
    for (const auto& k : xk) {
      if (!ak.count(k)) return at + "/" + k + ": missing";
    }
    for (const auto& k : ak) {
      if (!xk.count(k)) return at + "/" + k + ": not in the vocabulary's shape (or sent where it is omitted)";
    }
    for (const auto& k : xk) {
      simdjson::dom::element av, xv;
      if (ao[k].get(av) || xo[k].get(xv)) return at + "/" + k + ": unreadable";
      if (auto d = difference(av, xv, at + "/" + k, {}); !d.empty()) return d;
    }
  }
  if (x.type() == simdjson::dom::element_type::ARRAY) {
    simdjson::dom::array xa, aa;
    simdjson::dom::element ai, xi;
    if (x.get_array().get(xa) || a.get_array().get(aa)) return at + ": not an array";
    if (!xa.at(0).get(xi) && !aa.at(0).get(ai)) return difference(ai, xi, at + "/0", {});
  }
  return "";
}

}  // namespace

const std::set<std::string> kTerminalFields = {
    "type", "job_id", "outcome", "refusal_detail", "retry_after_ms", "killed", "pipestatus", "wall_ms", "queue_wait_ms",
    "bundle_bytes", "ran", "tree_hash", "workspace_changes", "git_state_changed", "untracked_files", "ignored_writes"};
const std::set<std::string> kAcceptedFields = {"type", "job_id", "queue_position", "env_not_forwarded", "network", "platform"};
const std::set<std::string> kStartedFields = {"type", "seq", "queue_wait_ms", "started_at_ms"};
const std::set<std::string> kOutputFields = {"type", "seq", "stream", "bytes", "truncated_before_seq"};
const std::set<std::string> kPrepareReplyFields = {"transfer_id", "outcome", "refusal_detail", "retry_after_ms"};
const std::set<std::string> kStatusReplyFields = {"queue_depth", "running_jobs", "server_reachable", "repositories",
                                                  "rustc_version"};

std::string fixture(const std::string& kind, const std::string& name) {
  std::ifstream in(fixtures_dir() + "/" + kind + "/" + name + ".json");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<std::string> fixture_names(const std::string& kind) {
  std::vector<std::string> names;
  if (DIR* d = opendir((fixtures_dir() + "/" + kind).c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.ends_with(".json")) names.push_back(n.substr(0, n.size() - 5));
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string canonical(const std::string& json, const std::set<std::string>& only) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json).get(root)) return "<invalid json>";
  if (only.empty() || root.type() != simdjson::dom::element_type::OBJECT) {
    std::string out;
    write_canonical(root, out);
    return out;
  }
  std::map<std::string, simdjson::dom::element> kept;
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) return "<invalid json>";
  for (auto [k, v] : obj) {
    if (only.count(std::string(k))) kept.emplace(std::string(k), v);
  }
  std::string out = "{";
  for (const auto& [k, v] : kept) {
    if (out.size() > 1) out.push_back(',');
    protocol::append_json_string(out, k);
    out.push_back(':');
    write_canonical(v, out);
  }
  return out + "}";
}

std::string shape_difference(const std::string& actual, const std::string& expected, const std::set<std::string>& only) {
  simdjson::dom::parser pa, px;
  simdjson::dom::element a, x;
  if (pa.parse(actual).get(a)) return "not JSON: " + actual;
  if (px.parse(expected).get(x)) return "the fixture is not JSON";
  return difference(a, x, "", only);
}

}  // namespace motor::test::vocabulary
