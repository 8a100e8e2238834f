#include "config/env_filter.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "motor/test_switches.hpp"

namespace motor::config {
namespace {

constexpr std::array<std::string_view, 5> kSecretWords = {"TOKEN", "SECRET", "PASSWORD", "KEY",
                                                          "CREDENTIAL"};
constexpr std::array<std::string_view, 4> kForwardedPrefixes = {"RUST_", "CARGO_", "NEXTEST_",
                                                                "LC_"};
constexpr std::array<std::string_view, 2> kForwardedNames = {"RUSTFLAGS", "RUSTDOCFLAGS"};
// Set by the runner for every job; a caller never replaces them.
constexpr std::array<std::string_view, 4> kRunnerOwned = {"PATH", "HOME", "USER", "LOGNAME"};

char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

bool contains_upper(std::string_view haystack, std::string_view upper_needle) {
  if (upper_needle.size() > haystack.size()) return false;
  for (std::size_t i = 0; i + upper_needle.size() <= haystack.size(); ++i) {
    bool match = true;
    for (std::size_t j = 0; j < upper_needle.size(); ++j) {
      if (ascii_upper(haystack[i + j]) != upper_needle[j]) {
        match = false;
        break;
      }
    }
    if (match) return true;
  }
  return false;
}

bool valid_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxEnvNameBytes &&
         name.find('=') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

bool valid_value(std::string_view value) { return value.find('\0') == std::string_view::npos; }

bool in_list(std::string_view name, const auto& list) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

bool allowed_by_default(std::string_view name) {
  if (in_list(name, kForwardedNames)) return true;
  return std::any_of(kForwardedPrefixes.begin(), kForwardedPrefixes.end(),
                     [&](std::string_view prefix) { return name.starts_with(prefix); });
}

bool allowed_by_list(std::string_view name, const std::vector<std::string>& allow_list) {
  for (const std::string& entry : allow_list) {
    std::string_view e = entry;
    if (!e.empty() && e.back() == '*') {
      if (name.starts_with(e.substr(0, e.size() - 1))) return true;
    } else if (name == e) {
      return true;
    }
  }
  return false;
}

// How an invalid name is shown in not_forwarded: never anything after '=' or NUL (that could be
// a value), at most kMaxEnvNameBytes, cut on a UTF-8 character boundary.
std::string shown_invalid_name(std::string_view name) {
  if (name.empty()) return "(empty name)";
  std::size_t end = std::min({name.find('='), name.find('\0'), name.size()});
  bool cut = end < name.size();
  if (end > kMaxEnvNameBytes) {
    end = kMaxEnvNameBytes;
    cut = true;
    // Back off continuation bytes so a multi-byte character is not split.
    while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80) --end;
  }
  std::string shown(name.substr(0, end));
  if (cut) shown += "...";
  return shown;
}

}  // namespace

std::string never_forwarded_reason(std::string_view name) {
  if (!valid_name(name)) return "invalid name";
  for (std::string_view word : kSecretWords) {
    if (contains_upper(name, word)) return "name contains " + std::string(word);
  }
  if (name == "SSH_AUTH_SOCK") return "SSH_AUTH_SOCK never crosses";
  if (in_list(name, kRunnerOwned)) return "set by the runner";
  return "";
}

EnvFilterResult filter_env(const std::vector<std::pair<std::string, std::string>>& requested,
                           const std::vector<std::string>& allow_list) {
  std::map<std::string, std::string> forwarded;
  std::vector<std::string> dropped;
  for (const auto& [name, value] : requested) {
    if (!valid_name(name)) {
      dropped.push_back(shown_invalid_name(name));
      continue;
    }
    // Test build only (include/motor/test_switches.hpp): every valid variable crosses.
    bool ok = valid_value(value) && (control_weakened("env-filter") ||
                                     (never_forwarded_reason(name).empty() &&
                                      (allowed_by_default(name) || allowed_by_list(name, allow_list))));
    if (!ok) {
      dropped.push_back(name);
      continue;
    }
    forwarded[name] = value;
  }
  // A name both forwarded (one value) and dropped (another value, e.g. with a NUL) is dropped:
  // the caller asked for something that cannot be honoured exactly.
  for (const std::string& name : dropped) forwarded.erase(name);

  EnvFilterResult result;
  result.forwarded.reserve(forwarded.size());
  for (auto& [name, value] : forwarded) result.forwarded.emplace_back(name, std::move(value));
  std::sort(dropped.begin(), dropped.end());
  dropped.erase(std::unique(dropped.begin(), dropped.end()), dropped.end());
  result.not_forwarded = std::move(dropped);
  return result;
}

std::vector<std::string> base_job_env(const std::string& home, const std::string& user) {
  return {
      "PATH=/usr/local/bin:/usr/bin:/bin",
      "HOME=" + home,
      "USER=" + user,
      "LOGNAME=" + user,
      "LANG=C.UTF-8",
  };
}

std::vector<std::string> job_env(const std::string& home, const std::string& user,
                                 const std::vector<std::pair<std::string, std::string>>& forwarded) {
  std::map<std::string, std::string> env;
  for (const std::string& entry : base_job_env(home, user)) {
    std::size_t eq = entry.find('=');
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : forwarded) {
    if (in_list(name, kRunnerOwned) || !valid_name(name) || !valid_value(value)) continue;
    env[name] = value;
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

}  // namespace motor::config
