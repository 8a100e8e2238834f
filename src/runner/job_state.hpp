// A job's state, as the runner's code uses it; its wire string (exec.status, exec.list,
// state.json) only where those are encoded and decoded.
#pragma once

#include <string_view>

namespace motor::runner {

enum class JobState { kQueued, kRunning, kFinished };

constexpr std::string_view to_wire(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kFinished: return "finished";
  }
  return "finished";
}

// state.json: an unknown state is read as running (recovery then kills what is left of it and
// records outcome_unknown rather than lose the job).
constexpr JobState parse_job_state(std::string_view s) {
  if (s == "queued") return JobState::kQueued;
  if (s == "finished") return JobState::kFinished;
  return JobState::kRunning;
}

}  // namespace motor::runner
