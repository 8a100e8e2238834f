// state.json: what must survive a crash of the runner. Written atomically (temp file, fsync,
// rename, fsync of the directory) on every change that matters; read once at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "runner/job_state.hpp"

namespace motor::runner {

struct PersistedJob {
  using State = JobState;
  std::string job_id;
  std::string caller;
  std::string workspace_key;
  std::string summary;        // the command, shortened, for `motor list`
  JobState state = JobState::kRunning;
  std::string cgroup;         // the job cgroup's name, to kill what is left after a crash
  int64_t created_at_ms = 0;
  int64_t started_at_ms = 0;
  std::string terminal_json;  // the terminal record once finished
  std::string secret_sha256;  // a direct job's secret digest (hex); never the secret itself
  // When set, this job's JSON exactly as encode_job gave it (finished jobs never change, so the
  // runner encodes each once) and the fields above are not read by encode_state.
  std::string encoded;
};

std::string encode_job(const PersistedJob& job);

struct PersistedState {
  bool draining = false;
  std::vector<PersistedJob> jobs;
};

std::string encode_state(const PersistedState& state);
Expected<PersistedState> decode_state(std::string_view json);

Status save_state(const std::string& state_dir, const PersistedState& state);
// Replaces state.json with `text` (encode_state's), atomically and durably.
Status write_state_file(const std::string& state_dir, std::string_view text);
// Removes temp files of saves a crash interrupted (.state.json.XXXXXX beside state.json). Only
// while the state directory is locked: a live runner's writer may be making one.
void remove_interrupted_saves(const std::string& state_dir);
// A missing state.json is an empty state; a corrupt one is an error naming the file.
Expected<PersistedState> load_state(const std::string& state_dir);

}  // namespace motor::runner
