// When each step of a job's start happened, for the benchmarks (bench/README.md, "Where a job's
// start goes"): microseconds from the runner taking its exec.run, logged at debug level once the
// job ends (`start steps (us): ...`). Never part of a record or a reply: callers' output is the
// same with or without it.
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace motor::runner {

class StartSteps {
 public:
  enum Step : size_t {
    kRecorded,     // state.json has the job (fsynced): `accepted` goes out, admission may start it
    kAdmitted,     // out of the queue: its workspace directory and policy are made next
    kSpawnAsked,   // pipes made (and the cgroup, for a sandbox built ahead), the request is on its way to the job starter
    kStarterGot,   // the job starter read the request (its own clock stamp, sent back)
    kPlanned,      // the starter made the job's cgroup and planned the sandbox (seccomp compiled, mount plan made)
    kChildStarted, // the clone's child runs: clone3 made its namespaces (sandbox::ChildStamps)
    kMounted,      // the child built its root and pivoted
    kConfined,     // hostname, loopback, bounding set done
    kReady,        // account switched, capabilities and seccomp done: motor-init's exec next
    kCloned,       // the starter's clone3 returned: the sandbox is built and motor-init exec'd
    kExecd,        // the runner's loop saw the starter's answer and the exec
    kFirstOutput,  // the job's first output bytes were read
    kExited,       // the job's main process exited
    kTerminal,     // the terminal record is written
    kCount
  };
  StartSteps() : origin_ns_(uv_hrtime()) {}
  // The first time only: a step reached again (a second output chunk) keeps its first time.
  void mark(Step step) { mark_at(step, uv_hrtime()); }
  // At `at_ns` on uv_hrtime's clock (CLOCK_MONOTONIC: the job starter's stamps too); 0: unknown.
  void mark_at(Step step, uint64_t at_ns) {
    if (at_us_[step] < 0 && at_ns >= origin_ns_) at_us_[step] = static_cast<int64_t>((at_ns - origin_ns_) / 1000);
  }
  // "recorded 812 admitted 830 ..." (-1: never reached).
  std::string line() const {
    static constexpr std::array<const char*, kCount> kNames{"recorded", "admitted", "spawn_asked", "starter_got",
                                                            "planned", "child_started", "mounted", "confined", "ready",
                                                            "cloned", "execd",
                                                            "first_output", "exited", "terminal"};
    std::string out;
    for (size_t i = 0; i < kCount; ++i) out += fmt::format("{}{} {}", i ? " " : "", kNames[i], at_us_[i]);
    return out;
  }

 private:
  uint64_t origin_ns_;
  std::array<int64_t, kCount> at_us_{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
};

}  // namespace motor::runner
