// The capacity bench's job mix and one job's result, shared by the systems it drives
// (capacity_peers), the levels (capacity_level) and the report (capacity_report).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace motor::bench::capacity {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// The standard job mix. Every command first prints one line, so that "the command has begun"
// is seen the same way through all three systems (the first output byte); motor also reports
// its own `started` record, which is the start latency issue 6 asks for.
struct JobKind {
  const char* name;
  const char* command;
  const char* memory;  // a cap, or nullptr for the runner's default
  const char* stands_for;
};
constexpr JobKind kKinds[] = {
    {"short", "echo go; echo ok", nullptr, "a quick check (git status, ls)"},
    {"cpu", "echo go; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo $i", nullptr,
     "a compile step: one core busy for a while"},
    {"output", "echo go; seq 1 100000", nullptr, "a chatty test run (about 590 KB of output)"},
    {"memcap", "echo go; x=$(head -c 16000000 /dev/zero | tr '\\000' a); echo ${#x}", "256M",
     "a job with its own memory cap (16 MB held under a 256 MiB cap)"},
};
constexpr size_t kKindCount = std::size(kKinds);

// --job-nice N (an experiment, off by default): every job first lowers its own CPU priority, in
// every system alike, to see how much of the runner's start latency is CPU contention with its
// own jobs (jobs run at the runner's priority and, on cgroup v1, outside any cpu controller).
inline std::string g_job_prefix;
inline std::string job_command(size_t kind) { return g_job_prefix + kKinds[kind].command; }
constexpr int64_t kMemcapBytes = 256LL << 20;

inline std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  return out;
}

inline std::string num(double v, int decimals = 2) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : "null";
}
inline std::string ratio(double value, double base) {
  return (std::isfinite(value) && std::isfinite(base) && base > 0) ? fmt::format("{:.2f}", value / base) : "-";
}
inline std::string ms(double v) { return std::isfinite(v) ? fmt::format("{:.1f}", v) : "-"; }

// ---------------------------------------------------------------------------------------------
// One job's result, whichever system ran it.
struct JobResult {
  size_t kind = 0;
  bool ok = false;            // exit code 0
  bool in_window = false;     // finished before the level's deadline
  std::string failure;        // refusal reason, nonzero exit, lost connection...
  double start_ms = NAN;      // motor only: request sent -> `started` record
  double first_ms = NAN;      // request / spawn -> the first output byte (all systems)
  double wall_ms = NAN;       // request / spawn -> terminal record / exit
  double queue_wait_ms = NAN; // motor only: `started.queue_wait_ms`
  double begin_s = 0, end_s = 0;  // submitted / ended, seconds from the level's start
};

// What a system needs to run one job of the mix. `running` counts jobs between their start
// (motor: `started`; peers: first output byte) and their end, for "per running job" figures.
using RunOne = std::function<JobResult(size_t kind, Clock::time_point deadline, std::atomic<int>& running)>;

}  // namespace motor::bench::capacity
