#include "vm/qga_protocol.hpp"

#include <simdjson.h>

#include "protocol/base64.hpp"
#include "protocol/json_writer.hpp"

namespace motor::vm {

using protocol::append_json_string;

Status QgaFramer::feed(std::string_view bytes, std::vector<std::string>& out) {
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == 0xFF) {  // the delimiter before a guest-sync-delimited reply: drop any partial message
      cur_.clear();
      depth_ = 0;
      in_string_ = escape_ = false;
      continue;
    }
    if (depth_ == 0) {
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
      if (c != '{') return make_error("guest_agent", "the guest agent sent bytes outside a JSON object");
    }
    if (cur_.size() >= max_) {
      return make_error("guest_agent", "the guest agent sent a message over " + std::to_string(max_) + " bytes");
    }
    cur_.push_back(ch);
    if (in_string_) {
      if (escape_) escape_ = false;
      else if (c == '\\') escape_ = true;
      else if (c == '"') in_string_ = false;
      continue;
    }
    if (c == '"') in_string_ = true;
    else if (c == '{' || c == '[') ++depth_;
    else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        out.push_back(std::move(cur_));
        cur_.clear();
      }
    }
  }
  return {};
}

namespace {

std::string command(std::string_view name, std::string_view arguments_json) {
  std::string s = "{\"execute\":";
  append_json_string(s, name);
  if (!arguments_json.empty()) {
    s += ",\"arguments\":";
    s += arguments_json;
  }
  s += "}\n";
  return s;
}

void append_string_array(std::string& s, const std::vector<std::string>& items) {
  s += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) s += ',';
    append_json_string(s, items[i]);
  }
  s += ']';
}

Expected<simdjson::dom::element> parse_reply(simdjson::dom::parser& parser, std::string_view msg) {
  simdjson::dom::element doc;
  if (parser.parse(msg.data(), msg.size()).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    return make_error("guest_agent", "the guest agent sent a reply that is not a JSON object");
  }
  simdjson::dom::element err;
  if (doc["error"].get(err) == simdjson::SUCCESS) {
    std::string_view desc = "(no description)";
    if (err["desc"].get(desc) != simdjson::SUCCESS) desc = "(no description)";
    return make_error("guest_agent", "the guest agent refused: " + std::string(desc.substr(0, 512)));
  }
  simdjson::dom::element ret;
  if (doc["return"].get(ret) != simdjson::SUCCESS) return make_error("guest_agent", "the guest agent's reply has no \"return\"");
  return ret;
}

}  // namespace

// No 0xFF is sent first: qemu-ga answers a stray 0xFF with an error reply of its own, which would
// break one-reply-per-request; each VM is fresh, so its agent's parser holds nothing stale.
std::string qga_sync_delimited(int64_t id) {
  return command("guest-sync-delimited", "{\"id\":" + std::to_string(id) + "}");
}

std::string qga_exec(const std::string& path, const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::string a = "{\"path\":";
  append_json_string(a, path);
  a += ",\"arg\":";
  append_string_array(a, args);
  a += ",\"env\":";
  append_string_array(a, env);
  a += ",\"capture-output\":false}";
  return command("guest-exec", a);
}

std::string qga_exec_status(int64_t pid) { return command("guest-exec-status", "{\"pid\":" + std::to_string(pid) + "}"); }

std::string qga_file_open(const std::string& path, const std::string& mode) {
  std::string a = "{\"path\":";
  append_json_string(a, path);
  a += ",\"mode\":";
  append_json_string(a, mode);
  a += '}';
  return command("guest-file-open", a);
}

std::string qga_file_read(int64_t handle, int64_t count) {
  return command("guest-file-read", "{\"handle\":" + std::to_string(handle) + ",\"count\":" + std::to_string(count) + "}");
}

std::string qga_file_close(int64_t handle) { return command("guest-file-close", "{\"handle\":" + std::to_string(handle) + "}"); }

Expected<int64_t> qga_parse_int_return(simdjson::dom::parser& parser, std::string_view msg) {
  auto ret = parse_reply(parser, msg);
  if (!ret) return ret.error();
  int64_t v = 0;
  if (ret->get(v) != simdjson::SUCCESS) return make_error("guest_agent", "the guest agent returned no integer");
  return v;
}

Expected<int64_t> qga_parse_exec(simdjson::dom::parser& parser, std::string_view msg) {
  auto ret = parse_reply(parser, msg);
  if (!ret) return ret.error();
  int64_t pid = 0;
  if ((*ret)["pid"].get(pid) != simdjson::SUCCESS) return make_error("guest_agent", "guest-exec returned no pid");
  return pid;
}

Expected<QgaExecStatus> qga_parse_exec_status(simdjson::dom::parser& parser, std::string_view msg) {
  auto ret = parse_reply(parser, msg);
  if (!ret) return ret.error();
  QgaExecStatus st;
  if ((*ret)["exited"].get(st.exited) != simdjson::SUCCESS) return make_error("guest_agent", "guest-exec-status has no \"exited\"");
  int64_t v = 0;
  if ((*ret)["exitcode"].get(v) == simdjson::SUCCESS) st.exit_code = v;
  if ((*ret)["signal"].get(v) == simdjson::SUCCESS) st.signal = v;
  return st;
}

Expected<QgaFileChunk> qga_parse_file_read(simdjson::dom::parser& parser, std::string_view msg, size_t max_bytes) {
  auto ret = parse_reply(parser, msg);
  if (!ret) return ret.error();
  QgaFileChunk chunk;
  std::string_view b64;
  int64_t count = 0;
  if ((*ret)["buf-b64"].get(b64) != simdjson::SUCCESS || (*ret)["count"].get(count) != simdjson::SUCCESS ||
      (*ret)["eof"].get(chunk.eof) != simdjson::SUCCESS) {
    return make_error("guest_agent", "guest-file-read's reply lacks buf-b64, count or eof");
  }
  if (count < 0 || static_cast<size_t>(count) > max_bytes || b64.size() > (max_bytes + 2) / 3 * 4) {
    return make_error("guest_agent", "guest-file-read returned more than was asked for");
  }
  auto bytes = protocol::base64_decode(b64);
  if (!bytes || bytes->size() != static_cast<size_t>(count)) {
    return make_error("guest_agent", "guest-file-read's data is not base64 of its count");
  }
  chunk.bytes = std::move(*bytes);
  return chunk;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], 0 if invalid, -1 if valid so far but cut short.
int utf8_sequence(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  int len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + static_cast<size_t>(k) >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return len;
}

}  // namespace

std::string Utf8Sanitizer::feed(std::string_view bytes) {
  std::string in = std::move(tail_);
  tail_.clear();
  in.append(bytes);
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    const int n = utf8_sequence(in, i);
    if (n < 0) {  // cut at the chunk's end: wait for the rest
      tail_.assign(in, i, std::string::npos);
      break;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(in, i, static_cast<size_t>(n));
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string Utf8Sanitizer::flush() {
  std::string out = tail_.empty() ? "" : "\xEF\xBF\xBD";
  tail_.clear();
  return out;
}

}  // namespace motor::vm
