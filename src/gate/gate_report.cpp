#include "gate/gate_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "motor/version.hpp"
#include "protocol/json_writer.hpp"

namespace motor::gate {
namespace {

std::string weakened_banner(const std::vector<std::string>& weakened) {
  return fmt::format("TEST BUILD: this runner ran with weakened control{} {} (--test-weaken): not a real gate result, "
                     "never use this build for jobs",
                     weakened.size() == 1 ? "" : "s", fmt::join(weakened, ", "));
}

void print_checks(const std::vector<HostCheck>& checks) {
  fmt::print("\nHost checks\n");
  size_t w = 0;
  for (const auto& c : checks) w = std::max(w, c.name.size());
  for (const auto& c : checks) {
    fmt::print("  {:<5} {:<{}}  {}\n", check_status_name(c.status), c.name, w, c.detail);
    if (c.status == CheckStatus::kFail && !c.fix.empty()) fmt::print("  {:<5} {:<{}}  fix: {}\n", "", "", w, c.fix);
  }
}

void print_attacks(const std::vector<AttackRecord>& attacks) {
  size_t wc = 7, wa = 6, wr = 6;
  for (const auto& a : attacks) {
    wc = std::max(wc, a.control.size());
    wa = std::max(wa, a.id.size());
    std::string r = result_name(a.verdict.result);
    wr = std::max(wr, r.size() + (a.verdict.result == Result::kSkipped ? 1 : 0));
  }
  wc = std::min<size_t>(wc, 56);
  fmt::print("\nAttacks (each a real job through the runner)\n");
  fmt::print("  {:<{}}  {:<{}}  {:<{}}  {}\n", "CONTROL", wc, "ATTACK", wa, "RESULT", wr, "EVIDENCE");
  for (const auto& a : attacks) {
    std::string control = a.control.size() > wc ? a.control.substr(0, wc - 3) + "..." : a.control;
    std::string result = result_name(a.verdict.result);
    if (a.verdict.result == Result::kSkipped) result += ":";
    fmt::print("  {:<{}}  {:<{}}  {:<{}}  {}\n", control, wc, a.id, wa, result, wr, a.verdict.evidence);
  }
}

void write_attack(protocol::JsonWriter& w, const AttackRecord& a) {
  w.begin_object().field("id", a.id).field("control", a.control).field("attack", a.description);
  w.field("result", result_json_name(a.verdict.result)).field("evidence", a.verdict.evidence);
  if (!a.needs.empty()) w.field("needs", a.needs);
  if (a.verdict.result == Result::kSkipped) w.field("host_level", a.verdict.host_level);
  w.end_object();
}

void write_summary(protocol::JsonWriter& w, const Summary& sum) {
  w.key("summary").begin_object();
  w.field("stopped", sum.stopped).field("got_through", sum.got_through).field("skipped", sum.skipped);
  w.field("skipped_without_host_reason", sum.skipped_not_host).field("inconclusive", sum.inconclusive);
  w.field("host_checks_failed", sum.checks_failed).field("attacks_run", static_cast<int64_t>(sum.attacks_run));
  w.field("line", sum.line()).field("passed", sum.passed());
  w.end_object();
}

}  // namespace

std::string Summary::line() const {
  std::string s = fmt::format("{} stopped, {} got through, {} skipped", stopped, got_through, skipped);
  if (inconclusive) s += fmt::format(", {} inconclusive", inconclusive);
  if (checks_failed) s += fmt::format("; {} host check{} failed", checks_failed, checks_failed == 1 ? "" : "s");
  if (attacks_run < attacks_known) s += fmt::format(" ({} of {} attacks run: --attack)", attacks_run, attacks_known);
  if (!weakened.empty()) s += fmt::format("; TEST BUILD, WEAKENED: {}", fmt::join(weakened, ", "));
  return s;
}

Summary summarize(const std::vector<HostCheck>& checks, const std::vector<AttackRecord>& records, size_t attacks_known,
                  std::vector<std::string> weakened) {
  Summary sum;
  sum.weakened = std::move(weakened);
  sum.attacks_run = records.size();
  sum.attacks_known = attacks_known;
  for (const auto& c : checks) sum.checks_failed += c.status == CheckStatus::kFail;
  for (const auto& r : records) {
    switch (r.verdict.result) {
      case Result::kStopped: ++sum.stopped; break;
      case Result::kGotThrough: ++sum.got_through; break;
      case Result::kSkipped:
        ++sum.skipped;
        sum.skipped_not_host += !r.verdict.host_level;
        break;
      case Result::kInconclusive: ++sum.inconclusive; break;
    }
  }
  return sum;
}

void print_table(const Report& r) {
  fmt::print("motor-runner gate {} (config: {}{})\n", kVersion, r.config_origin,
             r.jobs_through.empty() ? "" : "; jobs through " + r.jobs_through);
  if (!r.summary.weakened.empty()) fmt::print("\n!!! {} !!!\n", weakened_banner(r.summary.weakened));
  print_checks(r.checks);
  if (!r.fatal.empty()) fmt::print("\nThe gate could not run its attacks: {}\n", r.fatal);
  if (!r.attacks.empty()) print_attacks(r.attacks);
  for (const auto& n : r.notes) fmt::print("cleanup: {}\n", n);
  if (!r.summary.weakened.empty()) fmt::print("\n!!! {} !!!\n", weakened_banner(r.summary.weakened));
  fmt::print("\n{}\n", r.summary.line());
}

void print_json(const Report& r) {
  protocol::JsonWriter w;
  w.begin_object().field("gate", "motor-runner").field("version", kVersion).field("protocol", kProtocolVersion);
  w.field("config", r.config_origin);
  if (!r.jobs_through.empty()) w.field("jobs_through", r.jobs_through);
  w.key("weakened_controls").begin_array();
  for (const auto& c : r.summary.weakened) w.string(c);
  w.end_array();
  if (!r.summary.weakened.empty()) w.field("warning", weakened_banner(r.summary.weakened));
  w.key("host_checks").begin_array();
  for (const auto& c : r.checks) {
    w.begin_object().field("name", c.name).field("status", check_status_name(c.status)).field("detail", c.detail);
    if (c.status == CheckStatus::kFail) w.field("fix", c.fix);
    w.end_object();
  }
  w.end_array();
  if (!r.fatal.empty()) w.field("error", r.fatal);
  w.key("attacks").begin_array();
  for (const auto& a : r.attacks) write_attack(w, a);
  w.end_array();
  w.key("cleanup").begin_array();
  for (const auto& n : r.notes) w.string(n);
  w.end_array();
  write_summary(w, r.summary);
  w.end_object();
  fmt::print("{}\n", w.str());
}

}  // namespace motor::gate
