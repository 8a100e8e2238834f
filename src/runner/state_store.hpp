// What must survive a crash of the runner: the job table, in SQLite (state.db in the state
// directory, WAL mode, every commit fsynced), one row per job. Each save is a change (the rows
// that changed, the ids evicted, the drain flag) applied in one transaction, so a save costs what
// changed, not what the table holds. Read once at start.
//
// state.json (version 1) is the older whole-file form: found at start, it is the state (it
// replaces the table, in one transaction) and is then renamed state.json.migrated.
#pragma once

#include <cstdint>
#include <memory>
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

// state.json's form (what an older runner wrote; read once, to migrate it).
std::string encode_state(const PersistedState& state);
Expected<PersistedState> decode_state(std::string_view json);

// One save: whole rows of the jobs that changed (insert or replace), the ids that went, and the
// drain flag. Applying a change twice is harmless, so a save whose answer was lost is redone.
struct StateChange {
  bool draining = false;
  std::vector<PersistedJob> jobs;
  std::vector<std::string> removed;
};
// One change as JSON; `encoded_jobs` are encode_job's texts (a finished job is encoded once).
std::string encode_change(bool draining, const std::vector<std::string>& encoded_jobs,
                          const std::vector<std::string>& removed);
// Changes in order, as the state writer sends them: a JSON array of encode_change's objects.
std::string join_changes(const std::vector<std::string>& changes);
Expected<std::vector<StateChange>> decode_changes(std::string_view json);

inline constexpr int kStateSchemaVersion = 1;

// The job table (state.db). open() creates it if missing and refuses one of another application
// or of a newer schema, with a reason that says what to do.
class StateDb {
 public:
  static Expected<StateDb> open(const std::string& state_dir);
  StateDb(StateDb&&) noexcept;
  StateDb& operator=(StateDb&&) noexcept;
  ~StateDb();
  // Every change in order, in one transaction: all of them are durable, or none is.
  Status apply(const std::vector<StateChange>& changes);
  // The whole state, jobs by id.
  Expected<PersistedState> load();
  // Replaces the whole table with `state` (the migration from state.json), in one transaction.
  Status replace_all(const PersistedState& state);

 private:
  struct Impl;
  explicit StateDb(std::unique_ptr<Impl> impl);
  Status apply_all(const std::vector<StateChange>& changes, bool clear_first);
  std::unique_ptr<Impl> impl_;
};

// decode_changes + apply on a connection opened for this call (start-up, shutdown, or a runner
// whose writer process is gone).
Status apply_changes_now(const std::string& state_dir, std::string_view changes_json);
// Removes temp files of state.json saves an older runner's crash interrupted (.state.json.XXXXXX).
// Only while the state directory is locked.
void remove_interrupted_saves(const std::string& state_dir);
// Opens state.db (creating it), migrates a state.json found beside it, and reads the state; an
// unreadable or foreign database, or a corrupt state.json, is an error naming the file.
Expected<PersistedState> load_state(const std::string& state_dir);

}  // namespace motor::runner
