// libFuzzer: the runner's config parser (parse_config, what load_config_file applies to the
// file's text).
// Checks: no crash or sanitizer report; errors have the code "config" and name a line; what is
// accepted keeps the documented cross-key rules (default timeout and memory within their maxima,
// tcg only with allow_emulation).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "config/config.hpp"

using motor::fuzz::check;

namespace r = motor::config;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = r::parse_config(text, "fuzz");
  if (!c) {
    check(c.error().code == "config" && c.error().message.starts_with("config fuzz"));
    return 0;
  }
  check(c->default_timeout_s <= c->max_timeout_s);
  check(c->default_memory_bytes <= c->max_memory_bytes);
  check(c->vm_accelerator != motor::vm::Accelerator::kTcg || c->allow_emulation);
  return 0;
}
