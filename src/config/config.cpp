#include "config/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "motor/unique_fd.hpp"
#include "protocol/size.hpp"
#include "config/config_keys.hpp"

namespace motor::config {
namespace {

using namespace config_detail;

// The example file's opening: the format in brief (docs/configuration.md has it in full).
constexpr std::string_view kExampleHeader = R"motorconf(# motor-runner configuration.
#
# Format: one `key = value` per line. A line whose first non-blank character is `#` is a
# comment, and so is everything from a `#` that follows a blank. Values may be bare or in double
# quotes (inside quotes, \" is a quote and \\ a backslash). Lists are comma-separated. Sizes take
# a K, M or G suffix (powers of 1024). Every key is optional: a key left out keeps the default
# shown here. Unknown keys, keys given twice and bad values are errors naming the line and key.
# Keys marked "(SIGHUP)" take a new value on `systemctl reload`; the others need a restart.
# Full reference: docs/configuration.md, motor-runner.conf(5).
)motorconf";

std::string make_default_config_text() {
  std::string text(kExampleHeader);
  const Config defaults;
  for (const KeySpec& k : config_keys()) {
    if (!k.section.empty()) {
      std::string rule = "\n# --- " + std::string(k.section) + " ";
      if (rule.size() < 97) rule.append(97 - rule.size(), '-');
      text += rule + "\n\n";
    }
    std::string_view comment = k.comment;
    while (!comment.empty()) {
      const std::size_t eol = std::min(comment.find('\n'), comment.size());
      text += "# " + std::string(comment.substr(0, eol)) + "\n";
      comment.remove_prefix(std::min(eol + 1, comment.size()));
    }
    const std::string value = k.show(defaults);
    text += std::string(k.name) + (value.empty() ? " =" : " = " + value) +
            (k.reload == Reload::kLive ? "  # (SIGHUP)\n" : "\n");
  }
  return text;
}

}  // namespace

std::string_view default_config_text() {
  static const std::string text = make_default_config_text();
  return text;
}

namespace {
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_message(std::string_view key) {
  std::string_view best;
  std::size_t best_distance = 3;  // suggest only close matches
  for (const KeySpec& k : config_keys()) {
    std::size_t d = edit_distance(key, k.name);
    if (d < best_distance) {
      best_distance = d;
      best = k.name;
    }
  }
  std::string msg = "unknown key";
  if (!best.empty()) msg += " (did you mean " + std::string(best) + "?)";
  msg += "; the keys are listed in docs/configuration.md";
  return msg;
}

bool valid_key_syntax(std::string_view key) {
  return !key.empty() && key.front() >= 'a' && key.front() <= 'z' &&
         std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
         });
}

}  // namespace

Expected<int64_t> parse_size(std::string_view text) {
  auto size = protocol::parse_size(text);
  if (!size) return Error{"config", size.error().message + ", got " + shown(text)};
  return size;
}

namespace {

// One parse: the config so far, the line each key was set on, and how errors name the file.
struct ConfigParse {
  std::string where;
  Config config;
  std::map<std::string_view, std::size_t> seen;  // key -> line it was set on

  Error fail(std::size_t line, std::string_view key, const std::string& msg) const {
    std::string m = where + " line " + std::to_string(line) + ": ";
    if (!key.empty()) m += std::string(key) + ": ";
    return Error{"config", m + msg};
  }
  std::size_t line_of(std::string_view key) const {
    auto it = seen.find(key);
    return it == seen.end() ? std::size_t{0} : it->second;
  }
};

// One line of the file: blank, a comment or `key = value`.
std::optional<Error> parse_line(ConfigParse& parse, std::size_t line_no, std::string_view line) {
  if (line.find('\0') != std::string_view::npos) {
    return parse.fail(line_no, "", "contains a NUL byte");
  }
  std::string_view body = trim(line);
  if (body.empty() || body.front() == '#') return std::nullopt;

  std::size_t eq = body.find('=');
  if (eq == std::string_view::npos) {
    return parse.fail(line_no, "", "expected `key = value`, got " + shown(body));
  }
  std::string_view key = trim(body.substr(0, eq));
  std::string_view raw = body.substr(eq + 1);
  if (!valid_key_syntax(key)) {
    return parse.fail(line_no, "",
                      "expected a key name (lower-case letters, digits, '_') before '=', got " +
                          shown(key));
  }
  const KeySpec* spec = find_config_key(key);
  if (spec == nullptr) return parse.fail(line_no, key, unknown_key_message(key));
  auto [it, inserted] = parse.seen.emplace(spec->name, line_no);
  if (!inserted) {
    return parse.fail(line_no, key,
                      "set twice (first on line " + std::to_string(it->second) +
                          "); keep one of them");
  }

  Value value;
  auto lex_error = spec->list ? lex_list(raw, value) : lex_scalar(raw, value);
  if (lex_error) return parse.fail(line_no, key, *lex_error);
  if (auto err = spec->apply(parse.config, value)) return parse.fail(line_no, key, *err);
  return std::nullopt;
}

// Checks across keys: reported on the later of the two lines (the one that made it wrong).
std::optional<Error> check_across_keys(const ConfigParse& parse) {
  const Config& config = parse.config;
  auto cross = [&](std::string_view low_key, std::string_view high_key, const std::string& low,
                   const std::string& high) {
    std::size_t low_line = parse.line_of(low_key);
    std::size_t high_line = parse.line_of(high_key);
    std::string_view key = low_line >= high_line ? low_key : high_key;
    return parse.fail(std::max(low_line, high_line), key,
                      std::string(low_key) + " (" + low + ") is more than " +
                          std::string(high_key) + " (" + high + ")");
  };
  if (config.default_timeout_s > config.max_timeout_s) {
    return cross("default_timeout_s", "max_timeout_s", std::to_string(config.default_timeout_s),
                 std::to_string(config.max_timeout_s));
  }
  if (config.default_memory_bytes > config.max_memory_bytes) {
    return cross("default_memory", "max_memory", size_name(config.default_memory_bytes),
                 size_name(config.max_memory_bytes));
  }
  if (config.vm_accelerator == vm::Accelerator::kTcg && !config.allow_emulation) {
    return parse.fail(std::max(parse.line_of("vm_accelerator"), parse.line_of("allow_emulation")),
                      "vm_accelerator",
                      "tcg is emulation, which allow_emulation (false) refuses: set allow_emulation = true");
  }
  return std::nullopt;
}

}  // namespace

Expected<Config> parse_config(std::string_view text, std::string_view origin) {
  ConfigParse parse;
  parse.where = (origin.empty() || origin == "config") ? "config" : "config " + std::string(origin);
  if (text.size() > kMaxConfigBytes) {
    return Error{"config", parse.where + ": larger than " + std::to_string(kMaxConfigBytes) +
                               " bytes; is this really a config file?"};
  }
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (eol == text.size() && line.empty()) break;
    if (auto err = parse_line(parse, line_no, line)) return std::move(*err);
  }
  if (auto err = check_across_keys(parse)) return std::move(*err);
  return std::move(parse.config);
}

Expected<Config> load_config_file(const std::string& path) {
  const std::string where = "config " + path;
  auto io_error = [&](const std::string& what, int err) {
    return Error{"config", where + ": " + what + ": " + std::strerror(err)};
  };
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return io_error("cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return Error{"config", where + ": not a regular file"};
  if ((st.st_mode & S_IWOTH) != 0) {
    // Anyone could change who may use the runner: refuse rather than trust it.
    return Error{"config", where + ": writable by everyone; run chmod o-w " + path};
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxConfigBytes) {
    return Error{"config", where + ": larger than " + std::to_string(kMaxConfigBytes) +
                               " bytes; is this really a config file?"};
  }
  std::string text;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read", errno);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      return Error{"config", where + ": larger than " + std::to_string(kMaxConfigBytes) +
                                 " bytes; is this really a config file?"};
    }
  }
  return parse_config(text, path);
}

Expected<Config> load_runner_config(const std::optional<std::string>& path, std::string& origin) {
  if (path) {
    origin = *path;
    return load_config_file(*path);
  }
  const std::string fallback(kDefaultConfigPath);
  struct stat st {};
  if (::lstat(fallback.c_str(), &st) == 0 || errno != ENOENT) {
    origin = fallback;
    return load_config_file(fallback);
  }
  origin = kEmbeddedConfigOrigin;
  return parse_config(default_config_text(), origin);
}

ReloadOutcome apply_reload(Config& live, const Config& next) {
  ReloadOutcome out;
  for (const KeySpec& k : config_keys()) {
    const std::string now = k.show(live);
    const std::string wanted = k.show(next);
    if (now == wanted) continue;
    if (k.reload == Reload::kRestart) {
      out.kept.emplace_back(k.name);
      continue;
    }
    // Through the key's own parser: `show` writes text that parses back to the same value.
    Value value;
    const auto lexed = k.list ? lex_list(wanted, value) : lex_scalar(wanted, value);
    if (lexed || k.apply(live, value)) {
      out.kept.emplace_back(k.name);
      continue;
    }
    out.applied.emplace_back(k.name);
  }
  return out;
}

}  // namespace motor::config
