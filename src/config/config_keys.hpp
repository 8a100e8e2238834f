// The table of config keys from which the parser, the default config text, the example file
// (conf/motor-runner.conf), the reference (docs/configuration.md) and motor-runner.conf(5) come.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config/config_format.hpp"

namespace motor::config::config_detail {

// kLive: SIGHUP applies a new value to the running runner (it is read where it is used);
// kRestart: the runner keeps its value until restarted (SIGHUP says so in the log).
enum class Reload { kRestart, kLive };

struct KeySpec {
  std::string_view name;
  std::string_view section;  // non-empty on the first key of a section
  std::string_view type;     // path, text, word, number, seconds, size, boolean, list
  Reload reload;
  bool list;
  std::string_view comment;  // the example file's comment above the key ("" when shared)
  std::string_view doc;      // the reference text (Markdown: `code` only)
  std::optional<std::string> (*apply)(Config&, Value&);
  std::string (*show)(const Config&);
};

std::span<const KeySpec> config_keys();
std::span<const KeySpec> vm_config_keys();
const KeySpec* find_config_key(std::string_view name);

}  // namespace motor::config::config_detail
