#include "runner/metrics.hpp"

#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "motor/sys_error.hpp"

namespace motor::runner {

namespace {

constexpr const char* kJobsFinished = "motor_jobs_finished_total";
constexpr const char* kRefusals = "motor_refusals_total";
constexpr const char* kStartLatency = "motor_job_start_latency_seconds";
constexpr const char* kQueueWait = "motor_job_queue_wait_seconds";
constexpr const char* kRunning = "motor_jobs_running";
constexpr const char* kQueued = "motor_jobs_queued";
constexpr const char* kCpusClaimed = "motor_cpus_claimed";
constexpr const char* kCpusTotal = "motor_cpus_capacity";  // not _total: that suffix is for counters
constexpr const char* kMemoryClaimed = "motor_memory_claimed_bytes";
constexpr const char* kLoopStall = "motor_loop_worst_stall_seconds";
constexpr const char* kSessions = "motor_sessions";
constexpr const char* kDraining = "motor_draining";
constexpr const char* kStartTime = "motor_runner_start_time_seconds";
constexpr const char* kCacheFillsStarted = "motor_cache_fills_started_total";
constexpr const char* kCacheFillsFinished = "motor_cache_fills_finished_total";
constexpr const char* kWarmTargetHits = "motor_cache_warm_target_hits_total";
constexpr const char* kWarmSpares = "motor_cache_warm_spares_total";
constexpr const char* kCacheBytes = "motor_cache_bytes";
constexpr const char* kCacheEvictions = "motor_cache_evictions_total";
constexpr const char* kCacheEvictedBytes = "motor_cache_evicted_bytes_total";

bool valid_metric_name(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view n) {
  if (n.empty() || n.starts_with("__")) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

Error metrics_error(std::string message) { return make_error("metrics", std::move(message)); }

std::vector<std::string> key_of(std::initializer_list<std::string_view> label_values) {
  std::vector<std::string> key;
  key.reserve(label_values.size());
  for (std::string_view v : label_values) key.emplace_back(v);
  return key;
}

// `{a="x",b="y"}` (with an extra trailing label such as le), or "" when there are none.
std::string label_text(const std::vector<std::string>& names, const std::vector<std::string>& values,
                       std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return {};
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out += ',';
    out += extra_name;
    out += "=\"";
    out += escape_label_value(extra_value);
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_sample_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";  // also -0
  return fmt::format("{}", value);
}

Metrics::Metrics() {
  // The definitions below are known to be valid; a failure here is a programming error.
  auto must = [](Status s) {
    if (!s) std::abort();
  };
  must(define_counter(kJobsFinished, "Jobs that reached their terminal record, by outcome type.", {"outcome"}));
  for (std::string_view o : kJobOutcomes) touch(kJobsFinished, {o});
  must(define_counter(kRefusals, "Jobs refused before they started, by refusal reason.", {"reason"}));
  for (std::string_view r : kRefusalReasons) touch(kRefusals, {r});
  must(define_histogram(kStartLatency, "Time from a job's exec.run request to its started record.",
                        std::vector<double>(std::begin(kStartLatencyBuckets), std::end(kStartLatencyBuckets))));
  must(define_histogram(kQueueWait, "Time a job waited in the runner's queue before it started.",
                        std::vector<double>(std::begin(kQueueWaitBuckets), std::end(kQueueWaitBuckets))));
  must(define_gauge(kRunning, "Jobs running now."));
  must(define_gauge(kQueued, "Jobs waiting in the queue now."));
  must(define_gauge(kCpusClaimed, "CPUs claimed by running jobs."));
  must(define_gauge(kCpusTotal, "CPUs the runner hands out to jobs."));
  must(define_gauge(kMemoryClaimed, "Memory reserved by running jobs, in bytes."));
  must(define_gauge(kLoopStall, "Longest time one iteration of the runner's loop spent in callbacks since the last reset."));
  must(define_gauge(kSessions, "Client sessions open now."));
  must(define_gauge(kDraining, "1 while the runner is draining (refusing new jobs), else 0."));
  must(define_gauge(kStartTime, "Unix time the runner started, in seconds."));
  must(define_counter(kCacheFillsStarted, "Compile-cache fill jobs queued."));
  must(define_counter(kCacheFillsFinished, "Compile-cache fill jobs that ended, by result.", {"result"}));
  for (std::string_view r : kCacheFillResults) touch(kCacheFillsFinished, {r});
  must(define_counter(kWarmTargetHits, "Jobs or workspaces that started from a published warm target."));
  must(define_counter(kWarmSpares, "Spare copies of warm targets made, failed or taken by a new workspace.", {"event"}));
  for (std::string_view e : kWarmSpareEvents) touch(kWarmSpares, {e});
  must(define_gauge(kCacheBytes, "Bytes of the compile cache at its last measurement, by kind.", {"kind"}));
  for (std::string_view k : kCacheKinds) touch(kCacheBytes, {k});
  must(define_counter(kCacheEvictions, "Fill workspaces and warm targets removed, by reason.", {"reason"}));
  must(define_counter(kCacheEvictedBytes, "Bytes of the fill workspaces and warm targets removed, by reason.", {"reason"}));
  for (std::string_view r : kCacheEvictionReasons) {
    touch(kCacheEvictions, {r});
    touch(kCacheEvictedBytes, {r});
  }
}

void Metrics::job_finished(std::string_view outcome) { inc(kJobsFinished, {outcome}); }

void Metrics::refused(std::string_view reason) {
  inc(kRefusals, {reason});
  inc(kJobsFinished, {"refused_before_start"});
}

void Metrics::observe_start_latency(double seconds) { observe(kStartLatency, seconds); }
void Metrics::observe_queue_wait(double seconds) { observe(kQueueWait, seconds); }
void Metrics::set_running(int64_t jobs) { set(kRunning, static_cast<double>(jobs)); }
void Metrics::set_queued(int64_t jobs) { set(kQueued, static_cast<double>(jobs)); }
void Metrics::set_cpus_claimed(double cpus) { set(kCpusClaimed, cpus); }
void Metrics::set_cpus_total(double cpus) { set(kCpusTotal, cpus); }
void Metrics::set_memory_claimed_bytes(int64_t bytes) { set(kMemoryClaimed, static_cast<double>(bytes)); }
void Metrics::set_loop_worst_stall_seconds(double seconds) { set(kLoopStall, seconds); }
void Metrics::set_sessions(int64_t sessions) { set(kSessions, static_cast<double>(sessions)); }
void Metrics::set_draining(bool draining) { set(kDraining, draining ? 1 : 0); }
void Metrics::set_start_time_seconds(double unix_seconds) { set(kStartTime, unix_seconds); }
void Metrics::cache_fill_started() { inc(kCacheFillsStarted); }
void Metrics::cache_fill_finished(std::string_view result) { inc(kCacheFillsFinished, {result}); }
void Metrics::warm_target_hit() { inc(kWarmTargetHits); }
void Metrics::warm_spare(std::string_view event) { inc(kWarmSpares, {event}); }
void Metrics::set_cache_bytes(std::string_view kind, int64_t bytes) { set(kCacheBytes, {kind}, static_cast<double>(bytes)); }
void Metrics::cache_evicted(std::string_view reason, int64_t bytes) {
  inc(kCacheEvictions, {reason});
  inc(kCacheEvictedBytes, {reason}, static_cast<double>(bytes));
}

Status Metrics::define_counter(std::string name, std::string help, std::vector<std::string> label_names) {
  return define(Type::kCounter, std::move(name), std::move(help), std::move(label_names), {});
}

Status Metrics::define_gauge(std::string name, std::string help, std::vector<std::string> label_names) {
  return define(Type::kGauge, std::move(name), std::move(help), std::move(label_names), {});
}

Status Metrics::define_histogram(std::string name, std::string help, std::vector<double> bounds,
                                 std::vector<std::string> label_names) {
  return define(Type::kHistogram, std::move(name), std::move(help), std::move(label_names), std::move(bounds));
}

Status Metrics::define(Type type, std::string name, std::string help, std::vector<std::string> label_names,
                       std::vector<double> bounds) {
  if (!valid_metric_name(name)) return metrics_error("invalid metric name \"" + name + "\"");
  if (type == Type::kCounter && !name.ends_with("_total")) {
    return metrics_error("counter \"" + name + "\" must end in _total");
  }
  if (type != Type::kCounter && name.ends_with("_total")) {
    return metrics_error("\"" + name + "\" ends in _total, which only counters may");
  }
  if (type == Type::kHistogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (name.ends_with(suffix)) return metrics_error("histogram \"" + name + "\" must not end in " + suffix);
    }
  }
  // Sample names must be unique across families: a histogram "x" also owns x_bucket, x_sum, x_count.
  auto sample_names = [](const std::string& n, Type t) {
    std::vector<std::string> v{n};
    if (t == Type::kHistogram) v.insert(v.end(), {n + "_bucket", n + "_sum", n + "_count"});
    return v;
  };
  for (const Family& f : families_) {
    for (const std::string& a : sample_names(f.name, f.type)) {
      for (const std::string& b : sample_names(name, type)) {
        if (a == b) return metrics_error("metric \"" + name + "\" collides with \"" + f.name + "\"");
      }
    }
  }
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& l = label_names[i];
    if (!valid_label_name(l)) return metrics_error("metric \"" + name + "\": invalid label name \"" + l + "\"");
    if (type == Type::kHistogram && l == "le") return metrics_error("histogram \"" + name + "\" cannot have a label \"le\"");
    if (std::find(label_names.begin(), label_names.begin() + static_cast<std::ptrdiff_t>(i), l) !=
        label_names.begin() + static_cast<std::ptrdiff_t>(i)) {
      return metrics_error("metric \"" + name + "\": label \"" + l + "\" given twice");
    }
  }
  if (type == Type::kHistogram) {
    if (bounds.empty()) return metrics_error("histogram \"" + name + "\" needs at least one bucket");
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
        return metrics_error("histogram \"" + name + "\": bucket bounds must be finite and strictly rising");
      }
    }
  }
  Family f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  f.label_names = std::move(label_names);
  f.bounds = std::move(bounds);
  families_.push_back(std::move(f));
  // A family without labels has exactly one series: expose it (at 0) from the start.
  if (families_.back().label_names.empty()) series(families_.back().name, type, {});
  return {};
}

Metrics::Family* Metrics::find(std::string_view name, Type type) {
  for (Family& f : families_) {
    if (f.name == name) return f.type == type ? &f : nullptr;
  }
  return nullptr;
}

const Metrics::Family* Metrics::find(std::string_view name) const {
  for (const Family& f : families_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Metrics::Series* Metrics::series(std::string_view name, Type type, std::initializer_list<std::string_view> label_values) {
  Family* f = find(name, type);
  // Unknown names and wrong label counts are ignored: a metric must never take the runner down.
  if (!f || label_values.size() != f->label_names.size()) return nullptr;
  auto [it, inserted] = f->series.try_emplace(key_of(label_values));
  if (inserted && type == Type::kHistogram) it->second.counts.assign(f->bounds.size() + 1, 0);
  return &it->second;
}

const Metrics::Series* Metrics::series(std::string_view name, std::initializer_list<std::string_view> label_values) const {
  const Family* f = find(name);
  if (!f) return nullptr;
  auto it = f->series.find(key_of(label_values));
  return it == f->series.end() ? nullptr : &it->second;
}

void Metrics::touch(std::string_view name, std::initializer_list<std::string_view> label_values) {
  const Family* f = find(name);
  if (f) series(name, f->type, label_values);
}

void Metrics::inc(std::string_view name, std::initializer_list<std::string_view> label_values, double delta) {
  if (!(delta >= 0)) return;  // negative or NaN
  if (Series* s = series(name, Type::kCounter, label_values)) s->value += delta;
}

void Metrics::set(std::string_view name, std::initializer_list<std::string_view> label_values, double value) {
  if (Series* s = series(name, Type::kGauge, label_values)) s->value = value;
}

void Metrics::observe(std::string_view name, std::initializer_list<std::string_view> label_values, double value) {
  if (std::isnan(value)) return;
  Family* f = find(name, Type::kHistogram);
  Series* s = series(name, Type::kHistogram, label_values);
  if (!f || !s) return;
  // The first bucket whose upper bound is >= value (buckets are "less than or equal").
  const auto at = std::lower_bound(f->bounds.begin(), f->bounds.end(), value);
  ++s->counts[static_cast<size_t>(at - f->bounds.begin())];
  s->sum += value;
  ++s->count;
}

double Metrics::value(std::string_view name, std::initializer_list<std::string_view> label_values) const {
  const Series* s = series(name, label_values);
  return s ? s->value : 0;
}

uint64_t Metrics::histogram_count(std::string_view name, std::initializer_list<std::string_view> label_values) const {
  const Series* s = series(name, label_values);
  return s ? s->count : 0;
}

double Metrics::histogram_sum(std::string_view name, std::initializer_list<std::string_view> label_values) const {
  const Series* s = series(name, label_values);
  return s ? s->sum : 0;
}

std::string Metrics::exposition() const {
  std::string out;
  for (const Family& f : families_) {
    const char* type = f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escape_help(f.help), f.name, type);
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::kHistogram) {
        out += fmt::format("{}{} {}\n", f.name, label_text(f.label_names, labels), format_sample_value(s.value));
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < s.counts.size(); ++i) {
        cumulative += s.counts[i];
        const std::string le = i < f.bounds.size() ? format_sample_value(f.bounds[i]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", f.name, label_text(f.label_names, labels, "le", le), cumulative);
      }
      out += fmt::format("{}_sum{} {}\n", f.name, label_text(f.label_names, labels), format_sample_value(s.sum));
      out += fmt::format("{}_count{} {}\n", f.name, label_text(f.label_names, labels), s.count);
    }
  }
  return out;
}

Status write_textfile(const std::string& path, std::string_view text) {
  // The collector runs as another account and must read it, whatever our umask.
  return write_file_atomically(path, text, 0644);
}

}  // namespace motor::runner
