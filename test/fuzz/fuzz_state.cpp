// libFuzzer: state.json as the state store's loader reads it at start (decode_state, which
// load_state applies to the file's bytes).
// Checks: no crash or sanitizer report; a corrupt file is an error with a reason, never a partial
// state; a decoded state encodes (encode_state, what save_state writes) to one that decodes to
// the same jobs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto state = r::decode_state(json);
  if (!state) {
    check(!state.error().message.empty());
    return 0;
  }
  const std::string again = r::encode_state(*state);
  auto state2 = r::decode_state(again);
  check(state2.ok());
  check(state2->draining == state->draining && state2->jobs.size() == state->jobs.size());
  for (size_t i = 0; i < state->jobs.size(); ++i) check(same_job(state->jobs[i], state2->jobs[i]));
  return 0;
}
