#include "client/cache_command.hpp"

#include <simdjson.h>

#include <cstdint>
#include <iterator>

#include <fmt/format.h>

#include "motor/printable.hpp"
#include "protocol/json_writer.hpp"

namespace motor::client {
namespace {

std::string_view text_of(simdjson::dom::element e, const char* key, std::string_view none = "-") {
  std::string_view v;
  return e[key].get_string().get(v) ? none : v;
}

int64_t number_of(simdjson::dom::element e, const char* key, int64_t none = -1) {
  int64_t v = 0;
  return e[key].get_int64().get(v) ? none : v;
}

// 1536 -> "1.5K": sizes as `du -h` prints them.
std::string human_bytes(int64_t bytes) {
  if (bytes < 0) return "-";
  constexpr const char* kUnits[] = {"", "K", "M", "G", "T", "P"};
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{}", bytes);
  const std::string text = fmt::format("{:.1f}", v);
  return (text.ends_with(".0") ? text.substr(0, text.size() - 2) : text) + kUnits[unit];
}

std::string age_of(simdjson::dom::element e, const char* key) {
  const int64_t s = number_of(e, key);
  return s < 0 ? "-" : fmt::format("{}s", s);
}

}  // namespace

std::string cache_clear_params(const std::string& repository_root) {
  protocol::JsonWriter w;
  w.begin_object();
  if (!repository_root.empty()) w.field("repository_root", repository_root);
  w.end_object();
  return w.take();
}

void print_cache_status(std::string_view raw) {
  simdjson::dom::parser parser;
  simdjson::dom::element result;
  if (parser.parse(raw.data(), raw.size())["result"].get(result)) return;
  simdjson::dom::array repos;
  if (result["repositories"].get_array().get(repos)) return;
  fmt::print("{:<12}  {:<12}  {:>8}  {:>8}  {:>8}  {:<8}  {}\n", "CALLER", "COMMIT", "AGE", "UNUSED", "SIZE", "RESULT",
             "REPOSITORY");
  // Callers name their repositories: escaped, so none writes escape sequences into the operator's terminal.
  for (auto r : repos) {
    fmt::print("{:<12}  {:<12}  {:>8}  {:>8}  {:>8}  {:<8}  {}\n", escape_control_chars(text_of(r, "caller")),
               text_of(r, "published_commit").substr(0, 12), age_of(r, "warm_target_age_s"), age_of(r, "last_used_age_s"),
               human_bytes(number_of(r, "bytes")), text_of(r, "last_rebuild_result"),
               escape_control_chars(text_of(r, "repository_root")));
  }
  simdjson::dom::element totals, limits;
  if (result["totals"].get(totals) || result["limits"].get(limits)) return;
  fmt::print("total: fills {}, warm targets {}, leftovers {}; shared caches {} (not evicted by Motor)\n",
             human_bytes(number_of(totals, "fill_bytes")), human_bytes(number_of(totals, "target_bytes")),
             human_bytes(number_of(totals, "leftover_bytes")), human_bytes(number_of(totals, "shared_bytes")));
  const int64_t max_bytes = number_of(limits, "max_bytes"), max_age = number_of(limits, "max_age_s");
  fmt::print("limits: cache_max_size {}, cache_max_age_s {}, swept every {}s\n", max_bytes == 0 ? "none" : human_bytes(max_bytes),
             max_age == 0 ? std::string("none") : std::to_string(max_age), number_of(limits, "sweep_interval_s"));
}

void print_cache_cleared(std::string_view raw) {
  simdjson::dom::parser parser;
  simdjson::dom::array cleared;
  if (parser.parse(raw.data(), raw.size())["result"]["cleared"].get_array().get(cleared)) return;
  if (cleared.size() == 0) fmt::print("nothing to clear\n");
  for (auto c : cleared) {
    fmt::print("cleared {} (caller {})\n", escape_control_chars(text_of(c, "repository_root")),
               escape_control_chars(text_of(c, "caller")));
  }
}

}  // namespace motor::client
