#include "screen/screen.hpp"

#include <charconv>

#include <fmt/format.h>

#include <simdjson.h>

#include "protocol/json_writer.hpp"

namespace motor::screen {
namespace {

Error bad_diff(std::string message) { return Error{"bad_diff", std::move(message)}; }

bool is_hex(std::string_view s, size_t min, size_t max) {
  if (s.size() < min || s.size() > max) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool is_mode(std::string_view s) {
  if (s.size() != 6) return false;
  for (char c : s) {
    if (c < '0' || c > '7') return false;
  }
  return true;
}

bool all_zeros(std::string_view id) { return id.find_first_not_of('0') == std::string_view::npos; }

// A name that does not read as what it is: C0 and C1 controls, DEL, the bidirectional
// overrides and marks ("trojan source": U+200E/F, U+202A-202E, U+2066-2069), invalid UTF-8.
bool has_control_character(std::string_view path) {
  for (size_t i = 0; i < path.size(); ++i) {
    const auto c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7f) return true;
    const auto next = i + 1 < path.size() ? static_cast<unsigned char>(path[i + 1]) : 0;
    const auto third = i + 2 < path.size() ? static_cast<unsigned char>(path[i + 2]) : 0;
    if (c == 0xc2 && next >= 0x80 && next <= 0x9f) return true;
    if (c == 0xe2 && next == 0x80 && (third == 0x8e || third == 0x8f || (third >= 0xaa && third <= 0xae))) return true;
    if (c == 0xe2 && next == 0x81 && third >= 0xa6 && third <= 0xa9) return true;
  }
  return !simdjson::validate_utf8(path.data(), path.size());
}

// Splits the input at NULs; the input must end with one (git ends every field with it).
Expected<std::vector<std::string_view>> fields_of(std::string_view in) {
  std::vector<std::string_view> f;
  if (in.empty()) return f;
  if (in.back() != '\0') return bad_diff("the diff does not end with a NUL: it is not `git diff --raw --numstat -z` output");
  while (!in.empty()) {
    const auto nul = in.find('\0');
    f.push_back(in.substr(0, nul));
    in.remove_prefix(nul + 1);
  }
  return f;
}

// The row that decides a file from what git said, before its content is read; nullptr when only
// its content (a shebang) is left to check.
const Rule* judge_without_content(const ChangedFile& f) {
  if (has_control_character(f.path) || has_control_character(f.old_path)) return &rule("control_character");
  static constexpr std::string_view kStatuses = "ACDMRT";
  if (kStatuses.find(f.status) == std::string_view::npos) return &rule("unmerged");
  for (const std::string* m : {&f.old_mode, &f.new_mode}) {
    if (*m != "000000" && *m != "100644" && *m != "100755" && *m != "120000" && *m != "160000") return &rule("unmerged");
  }
  if (f.old_mode == "160000" || f.new_mode == "160000") return &rule("submodule");
  if (f.old_mode == "120000" || f.new_mode == "120000") return &rule("symlink");
  if (f.status == 'T' || (f.old_mode != "000000" && f.new_mode != "000000" && f.old_mode != f.new_mode)) {
    return &rule("mode_change");
  }
  if (f.new_mode == "100755") return &rule("executable");
  if (f.binary) return &rule("binary");
  const Rule& here = classify_path(f.path);
  if ((f.status == 'R' || f.status == 'C') && &classify_path(f.old_path) != &here) return &rule("rename_across_classes");
  if (here.verdict == Verdict::kDoNotExecute || f.status == 'D') return &here;
  if (all_zeros(f.new_id)) return &rule("unreadable");  // only in a work tree: git cannot show it
  return nullptr;
}

bool needs_content_read(const ChangedFile& f) { return judge_without_content(f) == nullptr; }

void write_file_json(protocol::JsonWriter& w, const FileVerdict& v) {
  w.begin_object().field("path", v.file.path);
  if (v.file.old_path.empty()) w.field_null("old_path");
  else w.field("old_path", v.file.old_path);
  w.field("status", std::string(1, v.file.status));
  if (v.file.score >= 0) w.field("score", v.file.score);
  else w.field_null("score");
  w.field("old_mode", v.file.old_mode).field("new_mode", v.file.new_mode);
  w.field("verdict", verdict_text(v.verdict)).field("rule", v.rule->id).field("reason", v.rule->reason);
  w.end_object();
}

std::string file_name_text(const ChangedFile& f) {
  if (f.status == 'R' || f.status == 'C') {
    return fmt::format("{} -> {} ({}{})", printable_path(f.old_path), printable_path(f.path),
                       f.status == 'R' ? "renamed" : "copied", f.score >= 0 ? fmt::format(", {}% similar", f.score) : "");
  }
  return printable_path(f.path) + (f.status == 'D' ? " (deleted)" : f.status == 'A' ? " (added)" : "");
}

}  // namespace

Expected<std::vector<ChangedFile>> parse_git_diff(std::string_view in) {
  auto fields = fields_of(in);
  if (!fields) return fields.error();
  const auto& f = *fields;
  std::vector<ChangedFile> files;
  size_t i = 0;
  for (; i < f.size() && !f[i].empty() && f[i][0] == ':'; ++i) {
    // ":100644 100644 <id> <id> M"
    std::string_view head = f[i].substr(1);
    std::vector<std::string_view> parts;
    while (!head.empty()) {
      const auto sp = head.find(' ');
      parts.push_back(head.substr(0, sp));
      head.remove_prefix(sp == std::string_view::npos ? head.size() : sp + 1);
    }
    if (parts.size() != 5 || !is_mode(parts[0]) || !is_mode(parts[1]) || !is_hex(parts[2], 4, 64) ||
        !is_hex(parts[3], 4, 64) || parts[4].empty()) {
      return bad_diff(fmt::format("raw record {} is not \":MODE MODE ID ID STATUS\"", files.size() + 1));
    }
    ChangedFile c;
    c.old_mode = parts[0];
    c.new_mode = parts[1];
    c.old_id = parts[2];
    c.new_id = parts[3];
    c.status = parts[4][0];
    if (parts[4].size() > 1) {
      int score = -1;
      const auto digits = parts[4].substr(1);
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), score);
      if (ec != std::errc{} || p != digits.data() + digits.size() || score < 0 || score > 100) {
        return bad_diff(fmt::format("raw record {} has the status \"{}\"", files.size() + 1, parts[4]));
      }
      c.score = score;
    }
    const size_t paths = c.status == 'R' || c.status == 'C' ? 2 : 1;
    if (i + paths >= f.size()) return bad_diff(fmt::format("raw record {} is cut short", files.size() + 1));
    if (paths == 2) c.old_path = f[++i];
    c.path = f[++i];
    if (c.path.empty() || (paths == 2 && c.old_path.empty())) {
      return bad_diff(fmt::format("raw record {} has an empty path", files.size() + 1));
    }
    files.push_back(std::move(c));
  }
  // The numstat records, one per raw record.
  size_t n = 0;
  for (; i < f.size(); ++n) {
    if (n >= files.size()) return bad_diff("the diff has more numstat records than raw records");
    ChangedFile& c = files[n];
    std::string_view rec = f[i++];
    const auto t1 = rec.find('\t');
    const auto t2 = t1 == std::string_view::npos ? t1 : rec.find('\t', t1 + 1);
    if (t2 == std::string_view::npos) return bad_diff(fmt::format("numstat record {} is not \"ADDED\\tDELETED\\tPATH\"", n + 1));
    const std::string_view added = rec.substr(0, t1), deleted = rec.substr(t1 + 1, t2 - t1 - 1);
    const bool bin = added == "-" && deleted == "-";
    auto digits = [](std::string_view s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos; };
    if (!bin && !(digits(added) && digits(deleted))) {
      return bad_diff(fmt::format("numstat record {} counts \"{}\" and \"{}\"", n + 1, added, deleted));
    }
    std::string_view path = rec.substr(t2 + 1), old_path;
    if (path.empty()) {  // a rename or copy: the two paths follow
      if (i + 2 > f.size()) return bad_diff(fmt::format("numstat record {} is cut short", n + 1));
      old_path = f[i++];
      path = f[i++];
    }
    if (path != c.path || old_path != c.old_path) {
      return bad_diff(fmt::format("numstat record {} names another file than raw record {}", n + 1, n + 1));
    }
    c.binary = bin;
  }
  if (n != files.size()) {
    return bad_diff(fmt::format("the diff has {} raw records but {} numstat records (give --numstat: it is how git says "
                                "which files are binary)",
                                files.size(), n));
  }
  return files;
}

std::vector<std::string> blobs_to_read(const std::vector<ChangedFile>& files) {
  std::vector<std::string> ids;
  for (const auto& f : files) {
    if (ids.size() >= kMaxBlobsRead) break;
    if (needs_content_read(f)) ids.push_back(f.new_id);
  }
  return ids;
}

std::string cat_file_request(const std::vector<std::string>& ids) {
  std::string in;
  for (const auto& id : ids) in += id + "\n";
  return in;
}

Expected<BlobHeads> parse_cat_file_batch(std::string_view out, const std::vector<std::string>& ids) {
  BlobHeads heads;
  for (const auto& id : ids) {
    // "<id> <type> <size>\n<content>\n" or "<id> missing\n" (also "ambiguous").
    const auto nl = out.find('\n');
    if (nl == std::string_view::npos) return bad_diff("git cat-file stopped early");
    const std::string_view line = out.substr(0, nl);
    out.remove_prefix(nl + 1);
    const auto sp1 = line.find(' ');
    if (sp1 == std::string_view::npos || line.substr(sp1 + 1) == "missing" || line.substr(sp1 + 1) == "ambiguous") continue;
    const auto sp2 = line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos) return bad_diff("git cat-file printed \"" + std::string(line.substr(0, 80)) + "\"");
    const std::string_view type = line.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t size = 0;
    const auto size_text = line.substr(sp2 + 1);
    auto [p, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size);
    if (ec != std::errc{} || p != size_text.data() + size_text.size() || out.size() < size + 1 || out[size] != '\n') {
      return bad_diff("git cat-file's output is cut or malformed");
    }
    if (type == "blob") heads[id] = std::string(out.substr(0, std::min(size, kBlobHeadBytes)));
    out.remove_prefix(size + 1);
  }
  return heads;
}

Result decide(const std::vector<ChangedFile>& files, const BlobHeads& heads) {
  Result r;
  if (files.empty()) {
    r.summary = &rule("empty_change");
    return r;
  }
  bool all_may = true;
  for (const auto& f : files) {
    FileVerdict v;
    v.file = f;
    v.rule = judge_without_content(f);
    if (!v.rule) {
      auto it = heads.find(f.new_id);
      if (it == heads.end()) v.rule = &rule("unreadable");
      else if (it->second.starts_with("#!")) v.rule = &rule("shebang");
      else v.rule = &classify_path(f.path);
    }
    v.verdict = v.rule->verdict;
    all_may &= v.verdict == Verdict::kMayExecute;
    r.files.push_back(std::move(v));
  }
  r.verdict = all_may ? Verdict::kMayExecute : Verdict::kDoNotExecute;
  return r;
}

const char* verdict_text(Verdict v) { return v == Verdict::kMayExecute ? "MAY EXECUTE" : "DO NOT EXECUTE"; }

std::string printable_path(std::string_view path) {
  std::string out;
  for (unsigned char c : path) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

std::string render_text(const Result& r) {
  std::string out = std::string(verdict_text(r.verdict)) + "\n";
  if (r.summary) out += fmt::format("  the change: {} [{}]\n", r.summary->reason, r.summary->id);
  for (const auto& v : r.files) {
    out += fmt::format("  {:<14} {}: {} [{}]\n", v.verdict == Verdict::kMayExecute ? "may execute" : "DO NOT EXECUTE",
                       file_name_text(v.file), v.rule->reason, v.rule->id);
  }
  return out;
}

std::string render_json(const Result& r) {
  protocol::JsonWriter w;
  w.begin_object().field("verdict", verdict_text(r.verdict)).field("may_execute", r.verdict == Verdict::kMayExecute);
  if (r.summary) w.key("reason").begin_object().field("rule", r.summary->id).field("reason", r.summary->reason).end_object();
  else w.field_null("reason");
  w.key("files").begin_array();
  for (const auto& v : r.files) write_file_json(w, v);
  w.end_array().field_null("error").end_object();
  return w.take() + "\n";
}

std::string render_error_text(std::string_view message) {
  return fmt::format("DO NOT EXECUTE\n  the screen failed, so nothing may run: {}\n", message);
}

std::string render_error_json(std::string_view message) {
  protocol::JsonWriter w;
  w.begin_object().field("verdict", "DO NOT EXECUTE").field("may_execute", false).field_null("reason");
  w.key("files").begin_array().end_array().field("error", message).end_object();
  return w.take() + "\n";
}

std::string summary_line(const Result& r, size_t max_bytes) {
  std::string out = verdict_text(r.verdict);
  if (r.summary) out += fmt::format(": {} [{}]", r.summary->reason, r.summary->id);
  size_t shown = 0, refusing = 0;
  for (const auto& v : r.files) {
    if (v.verdict == Verdict::kMayExecute) continue;
    ++refusing;
    std::string item = fmt::format("{} {}: {} [{}]", shown ? ";" : ":", file_name_text(v.file), v.rule->reason, v.rule->id);
    if (out.size() + item.size() + 24 > max_bytes) continue;
    out += item;
    ++shown;
  }
  if (refusing > shown) out += fmt::format(" (+{} more)", refusing - shown);
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

}  // namespace motor::screen
