// One level of the capacity bench: one system at N concurrent clients for a window, and what
// was measured over it (capacity_level.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "capacity_job.hpp"
#include "stats.hpp"

namespace motor::test {
class RunnerProcess;
}

namespace motor::bench::capacity {

struct Level {
  std::string system;
  int clients = 0;
  double seconds = 0;   // the level's window
  double elapsed = 0;   // window + the drain of jobs in flight
  int completed = 0;    // ok and finished in the window
  double work_in_window = 0;  // sum over ok jobs of the share of each job's time inside the window
  int finished = 0;     // every job that ended (in or after the window)
  std::map<std::string, int> failures;
  std::vector<double> start_ms, first_ms, wall_ms, queue_wait_ms;
  std::vector<double> wall_ms_by_kind[kKindCount];
  double avg_running = 0;
  double host_cpu_s = 0;
  // motor only
  double runner_cpu_s = NAN, runner_rss_before = NAN, runner_rss_mean = NAN, runner_rss_peak = NAN, stall_us = NAN;
  std::map<std::string, std::vector<double>> slow_calls;  // what the runner logged as stalling its loop, ms
  // The runner's own view, from runner.status every 250 ms: jobs it counts as running, its queue
  // depth, and CPUs claimed (means; queue depth also its maximum).
  double status_running = NAN, status_queue = NAN, status_queue_max = NAN, status_cpus_claimed = NAN;
  // The loop thread's run-queue wait over the level, in % of the level's time: how long the
  // runner was ready to work but had no CPU (the scheduler, not the runner's own code).
  double runner_runq_wait_pct = NAN;
  double load1_after = 0;

  // Sustained throughput: jobs' worth of work done inside the window (a job that straddles the
  // window's end counts for the share of its time inside it), per second of window. Unlike
  // "finished inside the window", this does not drop to 0 when jobs take longer than the window.
  double jobs_per_s() const { return seconds > 0 ? work_in_window / seconds : 0; }
  int failed() const {
    int n = 0;
    for (const auto& [reason, count] : failures) n += count;
    return n;
  }
  // The start figure that compares across systems: the first output byte.
  double first_p50() const { return percentile(first_ms, 0.5); }
  // The start figure of the system itself: motor's `started`, the peers' first byte.
  const std::vector<double>& own_start() const { return system == "motor" ? start_ms : first_ms; }
  double host_busy_cores() const { return elapsed > 0 ? host_cpu_s / elapsed : 0; }
  // The runner's memory per running job: growth over its idle RSS just before the level (so
  // finished jobs kept from earlier levels do not count), per average running job.
  double runner_mib_per_running_job() const {
    return avg_running > 0 ? (runner_rss_mean - runner_rss_before) / avg_running : NAN;
  }
};

// A system the levels run: how it runs one job, the runner to sample (motor only), and what
// its start figure measures.
struct System {
  std::string name;
  RunOne run;
  const motor::test::RunnerProcess* runner = nullptr;
  std::string note;
};

// Runs `clients` client threads, each one job after another through run_one, for `seconds`;
// with a runner, also samples the runner's own figures.
Level run_level(const std::string& system, int clients, double seconds, const RunOne& run_one,
                const motor::test::RunnerProcess* runner);

// Where throughput saturates: the last level before the first one that adds < 10%.
int saturation_level(const std::vector<const Level*>& ls);
// The latency-bounded level: the highest level up to which every level kept its median start
// within 2x of its single-client median and its p99 within 4x of it, with no failures.
int latency_bounded_level(const std::vector<const Level*>& ls);

}  // namespace motor::bench::capacity
