// The runner's Prometheus metrics: a small registry of counters, gauges and fixed-bucket
// histograms, rendered as the text exposition format 0.0.4 for node_exporter's textfile
// collector (write_textfile) and for `motor status --metrics`.
//
// Pure: no loop, no threads, no locks. The runner owns one Metrics and calls it from its loop.
// Names follow the Prometheus conventions: `motor_` prefix, base units (seconds, bytes),
// `_total` on counters. Every predefined label value (each outcome, each refusal reason) is
// present from the start with a value of 0, so `rate()` and `increase()` see the first event.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::runner {

// Bucket upper bounds (seconds) of the predefined histograms; +Inf is implicit.
inline constexpr double kStartLatencyBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
inline constexpr double kQueueWaitBuckets[] = {0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600};

// The outcome label values of motor_jobs_finished_total (protocol outcome types that end a job).
inline constexpr std::string_view kJobOutcomes[] = {"exit", "signal", "cancelled", "refused_before_start",
                                                    "outcome_unknown"};
// The reason label values of motor_refusals_total (DESIGN.md "Refusal reasons").
inline constexpr std::string_view kRefusalReasons[] = {
    "unreachable",       "runner_version_mismatch", "snapshot_failed",       "workspace_key_rejected",
    "runner_full",       "runner_draining",         "runner_disk_full",      "queue_wait_exceeded",
    "transfer_interrupted", "tree_hash_mismatch",   "bundle_rejected",       "workspace_setup_failed",
    "network_unsupported", "platform_unsupported",  "screen_refused"};
// The label values of the compile-cache families (docs/compile-cache.md).
inline constexpr std::string_view kCacheFillResults[] = {"ok", "failed"};
inline constexpr std::string_view kCacheKinds[] = {"fill", "target", "shared"};  // motor_cache_bytes{kind}
inline constexpr std::string_view kCacheEvictionReasons[] = {"size", "age", "clear"};
// What became of warm spares (docs/compile-cache.md "Spares made ahead").
inline constexpr std::string_view kWarmSpareEvents[] = {"made", "failed", "taken"};

class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // A registry with the runner's metrics predefined (see the calls below).
  Metrics();
  // An empty registry (for tests of the generic part).
  struct Empty {};
  explicit Metrics(Empty) {}

  // ---- The runner's calls. ----
  // A job reached its terminal record; `outcome` is the outcome's "type" (kJobOutcomes).
  // A refusal also counts here as "refused_before_start" (refused() does that; do not call both).
  void job_finished(std::string_view outcome);
  // A job was refused with `reason`: counts motor_refusals_total{reason} and
  // motor_jobs_finished_total{outcome="refused_before_start"}.
  void refused(std::string_view reason);
  // From the exec.run request's arrival to the job's `started` record.
  void observe_start_latency(double seconds);
  // The job's queue wait (what `started.queue_wait_ms` says), in seconds.
  void observe_queue_wait(double seconds);
  void set_running(int64_t jobs);
  void set_queued(int64_t jobs);
  void set_cpus_claimed(double cpus);
  void set_cpus_total(double cpus);  // exposed as motor_cpus_capacity (_total is for counters)
  void set_memory_claimed_bytes(int64_t bytes);
  void set_loop_worst_stall_seconds(double seconds);
  void set_sessions(int64_t sessions);
  void set_draining(bool draining);
  void set_start_time_seconds(double unix_seconds);
  // Compile-cache fills: one queued; one ended with `result` (kCacheFillResults).
  void cache_fill_started();
  void cache_fill_finished(std::string_view result);
  // A job or workspace started from a published warm target.
  void warm_target_hit();
  // A warm spare made, failed to be made, or taken by a new workspace (kWarmSpareEvents).
  void warm_spare(std::string_view event);
  // The bytes the last measurement found, per kind (kCacheKinds).
  void set_cache_bytes(std::string_view kind, int64_t bytes);
  // A fill workspace or warm target removed, and why (kCacheEvictionReasons).
  void cache_evicted(std::string_view reason, int64_t bytes);

  // ---- The generic registry. ----
  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (not "__*",
  // not "le" on a histogram); a counter's name ends in _total and nothing else's does; histogram
  // bounds strictly rise.
  // Errors (code "metrics") on a bad or duplicate definition.
  Status define_counter(std::string name, std::string help, std::vector<std::string> label_names = {});
  Status define_gauge(std::string name, std::string help, std::vector<std::string> label_names = {});
  Status define_histogram(std::string name, std::string help, std::vector<double> bounds,
                          std::vector<std::string> label_names = {});
  // A family without labels is exposed (at 0) from its definition. touch() creates the series
  // of a labelled family with the given label values (at 0) so that it is exposed before its
  // first event. Label values are given in the order of the family's label names.
  void touch(std::string_view name, std::initializer_list<std::string_view> label_values = {});
  // Counter += delta. A negative or NaN delta is ignored: counters never go down.
  void inc(std::string_view name, std::initializer_list<std::string_view> label_values = {}, double delta = 1);
  void set(std::string_view name, std::initializer_list<std::string_view> label_values, double value);
  void set(std::string_view name, double value) { set(name, {}, value); }
  void observe(std::string_view name, std::initializer_list<std::string_view> label_values, double value);
  void observe(std::string_view name, double value) { observe(name, {}, value); }
  // The value of a counter or gauge series (0 when absent), and a histogram series' count and
  // sum: for tests and for `motor status`.
  double value(std::string_view name, std::initializer_list<std::string_view> label_values = {}) const;
  uint64_t histogram_count(std::string_view name, std::initializer_list<std::string_view> label_values = {}) const;
  double histogram_sum(std::string_view name, std::initializer_list<std::string_view> label_values = {}) const;

  // The text exposition format 0.0.4: per family `# HELP`, `# TYPE`, then its samples in label
  // order; histograms as cumulative `_bucket{le="..."}` ending with le="+Inf", `_sum`, `_count`.
  std::string exposition() const;

 private:
  struct Series {
    double value = 0;              // counter or gauge
    std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    std::string name, help;
    Type type = Type::kCounter;
    std::vector<std::string> label_names;
    std::vector<double> bounds;
    std::map<std::vector<std::string>, Series> series;
  };
  Status define(Type type, std::string name, std::string help, std::vector<std::string> label_names,
                std::vector<double> bounds);
  Family* find(std::string_view name, Type type);
  const Family* find(std::string_view name) const;
  Series* series(std::string_view name, Type type, std::initializer_list<std::string_view> label_values);
  const Series* series(std::string_view name, std::initializer_list<std::string_view> label_values) const;

  std::vector<Family> families_;  // in definition order, which is exposition order
};

// Prometheus escaping: a label value escapes backslash, double quote and newline; HELP text
// escapes backslash and newline.
std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view help);
// A sample value as Prometheus writes it: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string format_sample_value(double value);

// Writes `text` to `path` atomically for node_exporter's textfile collector: a temp file in the
// same directory (named ".<name>.XXXXXX", which the collector's "*.prom" glob never matches),
// mode 0644 whatever the umask, fsync, rename over `path`, fsync of the directory. On error the
// temp file is removed and the old file is left as it was. Blocks for the fsyncs: call it from
// a timer, not on every event.
Status write_textfile(const std::string& path, std::string_view text);

}  // namespace motor::runner
