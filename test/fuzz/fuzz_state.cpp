// libFuzzer: the job table's two JSON decoders. decode_state reads a state.json (what an older
// runner wrote, migrated into state.db at start); decode_changes reads what the runner hands its
// state writer (each change's rows, the ids evicted, the drain flag), before they reach SQLite.
// Checks: no crash or sanitizer report; a bad input is an error with a reason, never a partial
// result; what decodes re-encodes (encode_state; encode_job + encode_change + join_changes) to
// one that decodes to the same jobs and changes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "runner/state_store.hpp"

using motor::fuzz::check;

namespace r = motor::runner;

namespace {

bool same_job(const r::PersistedJob& a, const r::PersistedJob& b) {
  return a.job_id == b.job_id && a.caller == b.caller && a.workspace_key == b.workspace_key && a.summary == b.summary &&
         a.state == b.state && a.cgroup == b.cgroup && a.created_at_ms == b.created_at_ms &&
         a.started_at_ms == b.started_at_ms && a.secret_sha256 == b.secret_sha256;
}

void fuzz_state_json(std::string_view json) {
  auto state = r::decode_state(json);
  if (!state) {
    check(!state.error().message.empty());
    return;
  }
  const std::string again = r::encode_state(*state);
  auto state2 = r::decode_state(again);
  check(state2.ok());
  check(state2->draining == state->draining && state2->jobs.size() == state->jobs.size());
  for (size_t i = 0; i < state->jobs.size(); ++i) check(same_job(state->jobs[i], state2->jobs[i]));
}

void fuzz_changes(std::string_view json) {
  auto changes = r::decode_changes(json);
  if (!changes) {
    check(!changes.error().message.empty());
    return;
  }
  std::vector<std::string> encoded;
  for (const auto& ch : *changes) {
    std::vector<std::string> rows;
    for (const auto& j : ch.jobs) rows.push_back(r::encode_job(j));
    encoded.push_back(r::encode_change(ch.draining, rows, ch.removed));
  }
  auto again = r::decode_changes(r::join_changes(encoded));
  check(again.ok());
  check(again->size() == changes->size());
  for (size_t c = 0; c < changes->size(); ++c) {
    const auto& a = (*changes)[c];
    const auto& b = (*again)[c];
    check(a.draining == b.draining && a.removed == b.removed && a.jobs.size() == b.jobs.size());
    for (size_t i = 0; i < a.jobs.size(); ++i) check(same_job(a.jobs[i], b.jobs[i]));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  fuzz_state_json(json);
  fuzz_changes(json);
  return 0;
}
