#include "config/config_format.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "config/config.hpp"

namespace motor::config::config_detail {
namespace {
constexpr std::size_t kMaxShownValueBytes = 80;

}  // namespace

std::string shown(std::string_view value) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char c : value) {
    if (n++ == kMaxShownValueBytes) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

namespace {
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

namespace {
// Lexes one item (bare or quoted) starting at `pos`; stops before a ',' when `in_list`, before a
// comment, or at the end. Returns the error message, or nullopt.
std::optional<std::string> lex_item(std::string_view raw, std::size_t& pos, bool in_list,
                                    std::string& out, bool& quoted) {
  while (pos < raw.size() && is_blank(raw[pos])) ++pos;
  quoted = pos < raw.size() && raw[pos] == '"';
  if (quoted) {
    std::size_t open = pos++;
    while (true) {
      if (pos >= raw.size()) return "unterminated quoted string " + shown(raw.substr(open));
      char c = raw[pos++];
      if (c == '"') break;
      if (c == '\\') {
        if (pos < raw.size() && (raw[pos] == '"' || raw[pos] == '\\')) {
          out += raw[pos++];
          continue;
        }
        return "in a quoted string, a backslash must be followed by \" or \\, in " +
               shown(raw.substr(open));
      }
      out += c;
    }
    return std::nullopt;
  }
  std::size_t start = pos;
  while (pos < raw.size()) {
    char c = raw[pos];
    if (in_list && c == ',') break;
    if (c == '#' && (pos == 0 || is_blank(raw[pos - 1]))) break;
    if (c == '"') {
      return "a quote must surround the whole value (or list item), in " + shown(trim(raw));
    }
    ++pos;
  }
  out = std::string(trim(raw.substr(start, pos - start)));
  return std::nullopt;
}

// After an item: blanks, then a comment or the end (or a ',' in a list).
bool at_end(std::string_view raw, std::size_t& pos) {
  while (pos < raw.size() && is_blank(raw[pos])) ++pos;
  return pos >= raw.size() || raw[pos] == '#';
}

}  // namespace

std::optional<std::string> lex_scalar(std::string_view raw, Value& value) {
  std::size_t pos = 0;
  bool quoted = false;
  if (auto err = lex_item(raw, pos, false, value.scalar, quoted)) return err;
  if (!at_end(raw, pos)) {
    return "unexpected text after the quoted value: " + shown(trim(raw.substr(pos)));
  }
  return std::nullopt;
}

std::optional<std::string> lex_list(std::string_view raw, Value& value) {
  std::size_t pos = 0;
  if (at_end(raw, pos)) return std::nullopt;  // an empty list
  while (true) {
    std::string item;
    bool quoted = false;
    if (auto err = lex_item(raw, pos, true, item, quoted)) return err;
    if (item.empty() && !quoted) {
      return "empty item in the list " + shown(trim(raw)) + " (items are separated by commas)";
    }
    value.items.push_back(std::move(item));
    while (pos < raw.size() && is_blank(raw[pos])) ++pos;
    if (pos < raw.size() && raw[pos] == ',') {
      ++pos;
      std::size_t probe = pos;
      if (at_end(raw, probe)) return "the list " + shown(trim(raw)) + " ends with a comma";
      continue;
    }
    if (!at_end(raw, pos)) {
      return "expected a comma between list items, got " + shown(trim(raw.substr(pos)));
    }
    return std::nullopt;
  }
}

// --- Value checks: each returns the error message (without origin/line/key) or nullopt. -------

std::optional<std::string> to_whole(std::string_view text, std::string_view what, int64_t min,
                                    int64_t max, int64_t& out) {
  std::string_view digits = text;
  bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "expected " + std::string(what) + ", got " + shown(text);
  }
  if (negative) {
    return "must be at least " + std::to_string(min) + ", got " + std::string(text);
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc{} || ptr != digits.data() + digits.size() || v > max) {
    return "must be at most " + std::to_string(max) + ", got " + std::string(text);
  }
  if (v < min) return "must be at least " + std::to_string(min) + ", got " + std::string(text);
  out = v;
  return std::nullopt;
}

std::string size_name(int64_t bytes) {
  constexpr std::array<std::pair<int64_t, const char*>, 3> kUnits = {
      {{int64_t{1} << 30, "G"}, {int64_t{1} << 20, "M"}, {int64_t{1} << 10, "K"}}};
  for (const auto& [factor, suffix] : kUnits) {
    if (bytes != 0 && bytes % factor == 0) return std::to_string(bytes / factor) + suffix;
  }
  return std::to_string(bytes);
}

std::optional<std::string> to_size(std::string_view text, int64_t min, int64_t max,
                                   int64_t& out) {
  auto size = parse_size(text);
  if (!size) return size.error().message;
  if (*size < min) return "must be at least " + size_name(min) + ", got " + std::string(text);
  if (*size > max) return "must be at most " + size_name(max) + ", got " + std::string(text);
  out = *size;
  return std::nullopt;
}

std::optional<std::string> check_account_name(std::string_view name, std::string_view what) {
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
  };
  std::string_view body = name;
  if (!body.empty() && body.back() == '$') body.remove_suffix(1);
  bool ok = !body.empty() && name.size() <= 32 && body.front() != '-' &&
            std::all_of(body.begin(), body.end(), ok_char) &&
            !std::all_of(body.begin(), body.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (ok) return std::nullopt;
  return "expected " + std::string(what) +
         " (letters, digits, '_', '.', '-', at most 32, not starting with '-', not all digits), "
         "got " +
         shown(name);
}

std::optional<std::string> check_absolute_dir(std::string& path, bool allow_empty) {
  if (path.empty() && allow_empty) return std::nullopt;
  if (path.empty() || path.front() != '/') {
    return "expected an absolute path (starting with '/'), got " + shown(path);
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path == "/") return "must not be the root directory itself";
  return std::nullopt;
}

std::optional<std::string> set_optional_absolute(const std::string& value, std::string& out) {
  if (!value.empty() && value.front() != '/') return "expected an absolute path or \"\", got " + shown(value);
  out = value;
  return std::nullopt;
}

std::optional<std::string> to_bool(std::string_view text, bool& out) {
  if (text != "true" && text != "false") return "expected true or false, got " + shown(text);
  out = text == "true";
  return std::nullopt;
}

namespace {
// Whether a value must be quoted to read back as itself (in a list, a comma too).
bool needs_quotes(std::string_view v, bool in_list) {
  if (v.empty() || v != trim(v)) return true;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (c == '"' || c == '\\' || (in_list && c == ',')) return true;
    if (c == '#' && (i == 0 || v[i - 1] == ' ' || v[i - 1] == '\t')) return true;
  }
  return false;
}

std::string quoted(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}
}  // namespace

std::string show_scalar(const std::string& value) {
  return needs_quotes(value, false) ? quoted(value) : value;
}

// An empty list is written as nothing after the `=` (a lone "" would be one empty item).
std::string show_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ", ";
    out += needs_quotes(item, true) ? quoted(item) : item;
  }
  return out;
}

std::string show_uids(const std::vector<uid_t>& uids) {
  std::string out;
  for (uid_t uid : uids) out += (out.empty() ? "" : ", ") + std::to_string(uid);
  return out;
}

}  // namespace motor::config::config_detail
