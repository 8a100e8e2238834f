// Prometheus metrics: the text exposition format line by line, escaping, histogram
// cumulativity, counter monotonicity, a strict parser of the output, and the atomic textfile.
#include "runner/metrics.hpp"
#include "temp_dir.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace motor::runner {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// ---- A strict parser of the text exposition format 0.0.4 (what this test accepts). ----

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // unescaped values, in order
  double value = 0;
  std::string raw_value;
};

struct Parsed {
  std::map<std::string, std::string> help;  // family -> unescaped help
  std::map<std::string, std::string> type;  // family -> counter|gauge|histogram|...
  std::vector<std::string> family_order;
  std::vector<Sample> samples;
};

bool name_char(char c, bool first, bool allow_colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (allow_colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

size_t scan_name(const std::string& s, size_t at, bool allow_colon) {
  size_t i = at;
  while (i < s.size() && name_char(s[i], i == at, allow_colon)) ++i;
  return i;
}

std::optional<double> parse_value(const std::string& v) {
  if (v == "+Inf" || v == "Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size()) return std::nullopt;
  // strtod also takes hex, "inf" and "nan" spellings; Prometheus writes none of these.
  if (v.find_first_of("xXnN") != std::string::npos) return std::nullopt;
  return d;
}

// The family a sample belongs to: the name itself, or for _bucket/_sum/_count the histogram.
std::string family_of(const Parsed& p, const std::string& sample) {
  if (p.type.count(sample)) return sample;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample.size() > s.size() && sample.ends_with(s)) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      auto it = p.type.find(base);
      if (it != p.type.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return {};
}

// Where parse_exposition is in the text: the family whose block it is in, the families closed
// before it, and every series seen so far.
struct ParseState {
  std::string current_family;
  std::set<std::string> closed_families;
  std::set<std::string> seen_series;
};

// A "# HELP name text" or "# TYPE name type" line; an error message or "".
std::string parse_help_or_type(const std::string& line, const std::string& where, Parsed& p, ParseState& st) {
  std::string& current_family = st.current_family;
  std::set<std::string>& closed_families = st.closed_families;
  const bool is_help = line[2] == 'H';
  const size_t end = scan_name(line, 7, true);
  if (end == 7) return where + "no metric name";
  const std::string name = line.substr(7, end - 7);
  if (is_help) {
    if (end < line.size() && line[end] != ' ') return where + "bad name";
    std::string help;
    for (size_t i = end + 1; i < line.size(); ++i) {
      if (line[i] == '\\') {
        if (i + 1 >= line.size()) return where + "dangling backslash in HELP";
        const char e = line[++i];
        if (e == '\\') help += '\\';
        else if (e == 'n') help += '\n';
        else return where + "bad escape in HELP";
      } else {
        help += line[i];
      }
    }
    if (p.help.count(name)) return where + "second HELP for " + name;
    p.help[name] = help;
  } else {
    if (end >= line.size() || line[end] != ' ') return where + "TYPE without a type";
    const std::string type = line.substr(end + 1);
    if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped") {
      return where + "unknown type " + type;
    }
    if (p.type.count(name)) return where + "second TYPE for " + name;
    if (closed_families.count(name)) return where + "TYPE after samples of " + name;
    p.type[name] = type;
    p.family_order.push_back(name);
  }
  if (name != current_family) {
    if (!current_family.empty()) closed_families.insert(current_family);
    if (closed_families.count(name)) return where + "family " + name + " is split";
    current_family = name;
  }
  return {};
}

// The label set of a sample from just after its '{' at line[i] (i ends after the '}'); an error
// message or "".
std::string parse_labels(const std::string& line, const std::string& where, size_t& i, Sample& s) {
  ++i;
  std::set<std::string> label_names;
  while (i < line.size() && line[i] != '}') {
    const size_t lend = scan_name(line, i, false);
    if (lend == i) return where + "bad label name";
    const std::string lname = line.substr(i, lend - i);
    if (!label_names.insert(lname).second) return where + "label " + lname + " twice";
    i = lend;
    if (line.compare(i, 2, "=\"") != 0) return where + "expected =\" after label name";
    i += 2;
    std::string value;
    bool closed = false;
    while (i < line.size()) {
      const char c = line[i++];
      if (c == '"') {
        closed = true;
        break;
      }
      if (c == '\\') {
        if (i >= line.size()) return where + "dangling backslash";
        const char e = line[i++];
        if (e == '\\') value += '\\';
        else if (e == '"') value += '"';
        else if (e == 'n') value += '\n';
        else return where + "bad escape \\" + std::string(1, e);
      } else {
        value += c;
      }
    }
    if (!closed) return where + "unterminated label value";
    s.labels.emplace_back(lname, value);
    if (i < line.size() && line[i] == ',') ++i;
    else if (i < line.size() && line[i] != '}') return where + "expected , or }";
  }
  if (i >= line.size()) return where + "unterminated label set";
  ++i;  // '}'
  return {};
}

// A sample line ("name{labels} value [timestamp]"); an error message or "".
std::string parse_sample(const std::string& line, const std::string& where, Parsed& p, ParseState& st) {
  Sample s;
  size_t i = scan_name(line, 0, true);
  if (i == 0) return where + "no metric name";
  s.name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    if (std::string error = parse_labels(line, where, i, s); !error.empty()) return error;
  }
  if (i >= line.size() || line[i] != ' ') return where + "expected one space before the value";
  ++i;
  const size_t vend = line.find(' ', i);
  s.raw_value = line.substr(i, vend == std::string::npos ? std::string::npos : vend - i);
  if (vend != std::string::npos) {
    // An optional timestamp: an integer (ms).
    const std::string ts = line.substr(vend + 1);
    if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string::npos) return where + "bad timestamp";
  }
  const auto v = parse_value(s.raw_value);
  if (!v) return where + "bad value \"" + s.raw_value + "\"";
  s.value = *v;
  const std::string family = family_of(p, s.name);
  if (family.empty()) return where + "sample without a TYPE";
  if (family != st.current_family) return where + "sample of " + family + " outside its family's block";
  std::string key = s.name;
  for (const auto& [k, val] : s.labels) key += "\x1f" + k + "=" + val;
  if (!st.seen_series.insert(key).second) return where + "duplicate series";
  p.samples.push_back(std::move(s));
  return {};
}

// Returns an error message, or "" when the whole text is valid.
std::string parse_exposition(const std::string& text, Parsed& p) {
  if (!text.empty() && text.back() != '\n') return "text does not end in a newline";
  int n = 0;
  ParseState st;
  for (const std::string& line : lines_of(text)) {
    ++n;
    const std::string where = "line " + std::to_string(n) + " \"" + line + "\": ";
    if (line.empty()) continue;
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      if (std::string error = parse_help_or_type(line, where, p, st); !error.empty()) return error;
      continue;
    }
    if (line[0] == '#') continue;  // a comment
    if (std::string error = parse_sample(line, where, p, st); !error.empty()) return error;
  }
  return {};
}

const Sample* find_sample(const Parsed& p, const std::string& name,
                          const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  for (const Sample& s : p.samples) {
    if (s.name == name && s.labels == labels) return &s;
  }
  return nullptr;
}

Parsed must_parse(const std::string& text) {
  Parsed p;
  const std::string err = parse_exposition(text, p);
  EXPECT_EQ(err, "") << text;
  return p;
}

// ---- The parser itself refuses what it must (a validator that accepts anything proves nothing). ----

TEST(MetricsParser, RejectsMalformedText) {
  Parsed p;
  EXPECT_NE(parse_exposition("# TYPE a_total counter\na_total 1", p), "");  // no final newline
  p = {};
  EXPECT_NE(parse_exposition("a_total 1\n", p), "");  // no TYPE
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\na{x=\"1} 1\n", p), "");  // unterminated value
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\na{x=\"\\t\"} 1\n", p), "");  // bad escape
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\na{x=\"1\"}  1\n", p), "");  // two spaces
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\na one\n", p), "");
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\na 1\na 2\n", p), "");  // duplicate series
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\n# TYPE b gauge\nb 1\na 1\n", p), "");  // split family
  p = {};
  EXPECT_NE(parse_exposition("# TYPE a gauge\na{1x=\"v\"} 1\n", p), "");  // bad label name
  p = {};
  EXPECT_EQ(parse_exposition("# HELP a x \\\\ y\\n\n# TYPE a gauge\na{x=\"q\\\"\\\\\\n\"} -1.5e-3\n", p), "");
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0].labels[0].second, "q\"\\\n");
  EXPECT_EQ(p.help["a"], "x \\ y\n");
}

// ---- The exposition. ----

TEST(Metrics, PredefinedFamiliesHaveHelpAndTypeAndParse) {
  Metrics m;
  const std::string text = m.exposition();
  const Parsed p = must_parse(text);
  const std::map<std::string, std::string> want = {
      {"motor_jobs_finished_total", "counter"},      {"motor_refusals_total", "counter"},
      {"motor_job_start_latency_seconds", "histogram"}, {"motor_job_queue_wait_seconds", "histogram"},
      {"motor_jobs_running", "gauge"},               {"motor_jobs_queued", "gauge"},
      {"motor_cpus_claimed", "gauge"},               {"motor_cpus_capacity", "gauge"},
      {"motor_memory_claimed_bytes", "gauge"},       {"motor_loop_worst_stall_seconds", "gauge"},
      {"motor_sessions", "gauge"},
  };
  for (const auto& [name, type] : want) {
    ASSERT_TRUE(p.type.count(name)) << name << " missing in\n" << text;
    EXPECT_EQ(p.type.at(name), type) << name;
    ASSERT_TRUE(p.help.count(name)) << name;
    EXPECT_FALSE(p.help.at(name).empty()) << name;
  }
  for (const std::string& name : p.family_order) {
    EXPECT_TRUE(name.starts_with("motor_")) << name;
    EXPECT_EQ(p.type.at(name) == "counter", name.ends_with("_total")) << name;
  }
  // HELP comes right before TYPE for every family.
  const auto lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].starts_with("# TYPE ")) {
      ASSERT_GT(i, 0u);
      const std::string name = lines[i].substr(7, lines[i].find(' ', 7) - 7);
      EXPECT_TRUE(lines[i - 1].starts_with("# HELP " + name + " ")) << lines[i - 1];
    }
  }
  // Every outcome and every refusal reason is exposed at 0 before its first event.
  for (std::string_view o : kJobOutcomes) {
    const Sample* s = find_sample(p, "motor_jobs_finished_total", {{"outcome", std::string(o)}});
    ASSERT_NE(s, nullptr) << o;
    EXPECT_EQ(s->raw_value, "0");
  }
  ASSERT_NE(find_sample(p, "motor_refusals_total", {{"reason", "runner_full"}}), nullptr);
  ASSERT_NE(find_sample(p, "motor_job_start_latency_seconds_count"), nullptr);
  EXPECT_EQ(find_sample(p, "motor_job_start_latency_seconds_count")->raw_value, "0");
}

TEST(Metrics, RunnerCallsMoveTheirSeries) {
  Metrics m;
  m.job_finished("exit");
  m.job_finished("exit");
  m.job_finished("signal");
  m.refused("runner_full");
  m.set_running(3);
  m.set_queued(2);
  m.set_cpus_claimed(1.5);
  m.set_cpus_total(2);
  m.set_memory_claimed_bytes(int64_t{3} << 30);
  m.set_loop_worst_stall_seconds(0.0125);
  m.set_sessions(7);
  m.observe_start_latency(0.02);
  m.observe_queue_wait(0);
  const Parsed p = must_parse(m.exposition());
  auto v = [&](const std::string& n, std::vector<std::pair<std::string, std::string>> l = {}) {
    const Sample* s = find_sample(p, n, l);
    EXPECT_NE(s, nullptr) << n;
    return s ? s->value : -1;
  };
  EXPECT_EQ(v("motor_jobs_finished_total", {{"outcome", "exit"}}), 2);
  EXPECT_EQ(v("motor_jobs_finished_total", {{"outcome", "signal"}}), 1);
  EXPECT_EQ(v("motor_jobs_finished_total", {{"outcome", "refused_before_start"}}), 1);
  EXPECT_EQ(v("motor_jobs_finished_total", {{"outcome", "cancelled"}}), 0);
  EXPECT_EQ(v("motor_refusals_total", {{"reason", "runner_full"}}), 1);
  EXPECT_EQ(v("motor_refusals_total", {{"reason", "runner_draining"}}), 0);
  EXPECT_EQ(v("motor_jobs_running"), 3);
  EXPECT_EQ(v("motor_jobs_queued"), 2);
  EXPECT_EQ(v("motor_cpus_claimed"), 1.5);
  EXPECT_EQ(v("motor_cpus_capacity"), 2);
  EXPECT_EQ(v("motor_memory_claimed_bytes"), 3221225472.0);
  EXPECT_EQ(find_sample(p, "motor_memory_claimed_bytes")->raw_value, "3221225472");  // not 3.2e+09
  EXPECT_EQ(v("motor_loop_worst_stall_seconds"), 0.0125);
  EXPECT_EQ(v("motor_sessions"), 7);
  EXPECT_EQ(v("motor_job_start_latency_seconds_count"), 1);
  EXPECT_EQ(v("motor_job_start_latency_seconds_bucket", {{"le", "0.01"}}), 0);
  EXPECT_EQ(v("motor_job_start_latency_seconds_bucket", {{"le", "0.025"}}), 1);
  EXPECT_EQ(v("motor_job_queue_wait_seconds_bucket", {{"le", "0.001"}}), 1);
  // A refusal reason outside the known list is still counted, as its own series.
  m.refused("something_new");
  EXPECT_EQ(m.value("motor_refusals_total", {"something_new"}), 1);
}

TEST(Metrics, CompileCacheCallsMoveTheirSeries) {
  Metrics m;
  EXPECT_EQ(m.value("motor_cache_fills_finished_total", {"failed"}), 0);
  m.cache_fill_started();
  m.cache_fill_finished("ok");
  m.warm_target_hit();
  m.warm_target_hit();
  m.set_cache_bytes("target", 4096);
  m.cache_evicted("age", 1000);
  m.cache_evicted("age", 24);
  EXPECT_EQ(m.value("motor_cache_fills_started_total"), 1);
  EXPECT_EQ(m.value("motor_cache_fills_finished_total", {"ok"}), 1);
  EXPECT_EQ(m.value("motor_cache_warm_target_hits_total"), 2);
  EXPECT_EQ(m.value("motor_cache_bytes", {"target"}), 4096);
  EXPECT_EQ(m.value("motor_cache_evictions_total", {"age"}), 2);
  EXPECT_EQ(m.value("motor_cache_evicted_bytes_total", {"age"}), 1024);
  const std::string text = m.exposition();
  for (std::string_view series : {"motor_cache_bytes{kind=\"shared\"} 0\n", "motor_cache_evictions_total{reason=\"clear\"} 0\n"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series;  // every label value from the start
  }
}

TEST(Metrics, LabelValuesAreEscaped) {
  Metrics m{Metrics::Empty{}};
  ASSERT_TRUE(m.define_counter("t_total", "a help with \\ and\nnewline", {"v"}).ok());
  m.inc("t_total", {"quote\" back\\slash new\nline"});
  const std::string text = m.exposition();
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 3u) << text;  // the newline in the value did not split the line
  EXPECT_EQ(lines[0], "# HELP t_total a help with \\\\ and\\nnewline");
  EXPECT_EQ(lines[1], "# TYPE t_total counter");
  EXPECT_EQ(lines[2], "t_total{v=\"quote\\\" back\\\\slash new\\nline\"} 1");
  const Parsed p = must_parse(text);
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0].labels[0].second, "quote\" back\\slash new\nline");
  EXPECT_EQ(p.help.at("t_total"), "a help with \\ and\nnewline");
  EXPECT_EQ(escape_label_value("plain ünïcode"), "plain ünïcode");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInfEqualsCount) {
  Metrics m{Metrics::Empty{}};
  ASSERT_TRUE(m.define_histogram("h_seconds", "h", {0.25, 1, 10}, {"kind"}).ok());
  // Boundaries: a value equal to a bound falls in that bound's bucket (le = less or equal).
  for (double x : {0.125, 0.25, 0.5, 1.0, 3.0, 10.0, 99.0, 1024.0}) m.observe("h_seconds", {"a"}, x);
  m.observe("h_seconds", {"b"}, 0.5);
  m.observe("h_seconds", {"a"}, NAN);  // ignored
  const std::string text = m.exposition();
  const auto lines = lines_of(text);
  const std::vector<std::string> want = {
      "# HELP h_seconds h",
      "# TYPE h_seconds histogram",
      "h_seconds_bucket{kind=\"a\",le=\"0.25\"} 2",
      "h_seconds_bucket{kind=\"a\",le=\"1\"} 4",
      "h_seconds_bucket{kind=\"a\",le=\"10\"} 6",
      "h_seconds_bucket{kind=\"a\",le=\"+Inf\"} 8",
      "h_seconds_sum{kind=\"a\"} 1137.875",
      "h_seconds_count{kind=\"a\"} 8",
      "h_seconds_bucket{kind=\"b\",le=\"0.25\"} 0",
      "h_seconds_bucket{kind=\"b\",le=\"1\"} 1",
      "h_seconds_bucket{kind=\"b\",le=\"10\"} 1",
      "h_seconds_bucket{kind=\"b\",le=\"+Inf\"} 1",
      "h_seconds_sum{kind=\"b\"} 0.5",
      "h_seconds_count{kind=\"b\"} 1",
  };
  EXPECT_EQ(lines, want) << text;
  EXPECT_EQ(m.histogram_count("h_seconds", {"a"}), 8u);
  EXPECT_EQ(m.histogram_sum("h_seconds", {"a"}), 1137.875);

  // The same properties checked generically over the predefined histograms, after many values.
  Metrics r;
  for (int i = 0; i < 500; ++i) {
    r.observe_start_latency(0.0001 * i * i);
    r.observe_queue_wait(0.37 * i);
  }
  const Parsed p = must_parse(r.exposition());
  for (const char* h : {"motor_job_start_latency_seconds", "motor_job_queue_wait_seconds"}) {
    double previous = -1, previous_le = -INFINITY, inf = -1;
    for (const Sample& s : p.samples) {
      if (s.name != std::string(h) + "_bucket") continue;
      ASSERT_EQ(s.labels.size(), 1u);
      ASSERT_EQ(s.labels[0].first, "le");
      const double le = s.labels[0].second == "+Inf" ? INFINITY : std::stod(s.labels[0].second);
      EXPECT_GT(le, previous_le) << h;
      EXPECT_GE(s.value, previous) << h << " le=" << s.labels[0].second;
      previous = s.value;
      previous_le = le;
      if (s.labels[0].second == "+Inf") inf = s.value;
    }
    EXPECT_EQ(previous_le, INFINITY) << h << ": the last bucket is +Inf";
    const Sample* count = find_sample(p, std::string(h) + "_count");
    const Sample* sum = find_sample(p, std::string(h) + "_sum");
    ASSERT_NE(count, nullptr);
    ASSERT_NE(sum, nullptr);
    EXPECT_EQ(inf, count->value) << h;
    EXPECT_EQ(count->value, 500);
  }
  double want_sum = 0;
  for (int i = 0; i < 500; ++i) want_sum += 0.0001 * i * i;
  EXPECT_NEAR(find_sample(p, "motor_job_start_latency_seconds_sum")->value, want_sum, 1e-6 * want_sum);
}

TEST(Metrics, CountersNeverGoDown) {
  Metrics m;
  double last = 0;
  for (int i = 0; i < 100; ++i) {
    m.job_finished("exit");
    m.inc("motor_jobs_finished_total", {"exit"}, -5);     // ignored
    m.inc("motor_jobs_finished_total", {"exit"}, NAN);    // ignored
    m.set("motor_jobs_finished_total", {"exit"}, 0);     // not a gauge: ignored
    const double now = m.value("motor_jobs_finished_total", {"exit"});
    EXPECT_GT(now, last);
    last = now;
  }
  EXPECT_EQ(last, 100);
  // Gauges go both ways.
  m.set_running(5);
  m.set_running(1);
  EXPECT_EQ(m.value("motor_jobs_running"), 1);
}

TEST(Metrics, MisuseIsIgnoredOrRefused) {
  Metrics m{Metrics::Empty{}};
  EXPECT_FALSE(m.define_counter("no_suffix", "x").ok());           // counters end in _total
  EXPECT_FALSE(m.define_gauge("g_total", "x").ok());               // and only counters do
  EXPECT_FALSE(m.define_gauge("1bad", "x").ok());
  EXPECT_FALSE(m.define_gauge("bad-name", "x").ok());
  EXPECT_FALSE(m.define_gauge("g", "x", {"__reserved"}).ok());
  EXPECT_FALSE(m.define_gauge("g", "x", {"a", "a"}).ok());
  EXPECT_FALSE(m.define_histogram("h", "x", {1, 1}).ok());          // not strictly rising
  EXPECT_FALSE(m.define_histogram("h", "x", {}).ok());
  EXPECT_FALSE(m.define_histogram("h", "x", {1}, {"le"}).ok());
  ASSERT_TRUE(m.define_histogram("h", "x", {1}).ok());
  EXPECT_FALSE(m.define_gauge("h", "x").ok());                      // defined twice
  EXPECT_FALSE(m.define_gauge("h_count", "x").ok());                // collides with h's samples
  ASSERT_TRUE(m.define_gauge("g", "x", {"a"}).ok());
  m.set("g", {"one", "two"}, 1);  // wrong label count: ignored
  m.set("unknown", 1);            // unknown metric: ignored
  EXPECT_EQ(m.exposition(), "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\n"
                            "h_sum 0\nh_count 0\n# HELP g x\n# TYPE g gauge\n");
  must_parse(m.exposition());
}

TEST(Metrics, SampleValuesAreFormattedForPrometheus) {
  EXPECT_EQ(format_sample_value(0), "0");
  EXPECT_EQ(format_sample_value(-0.0), "0");
  EXPECT_EQ(format_sample_value(42), "42");
  EXPECT_EQ(format_sample_value(0.25), "0.25");
  EXPECT_EQ(format_sample_value(INFINITY), "+Inf");
  EXPECT_EQ(format_sample_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_sample_value(NAN), "NaN");
  for (double d : {1e-9, 123456789012.0, 1e300, 0.1 + 0.2}) {
    const auto back = parse_value(format_sample_value(d));
    ASSERT_TRUE(back.has_value()) << format_sample_value(d);
    EXPECT_EQ(*back, d);  // round-trips exactly
  }
}

// Prometheus's own linter (scripts/setup takes promtool out of Debian's prometheus package): the
// exposition parses and follows the naming conventions (promtool exits 3 on a lint problem, 1 on
// a parse error). Under CI=true a missing promtool fails: the skip would hide a regression.
TEST(Metrics, PromtoolAcceptsTheExposition) {
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "promtool is missing under CI=true (scripts/setup installs it)";
    GTEST_SKIP() << "promtool is not installed (scripts/setup installs it)";
  }
  Metrics m;
  m.job_finished("exit");
  m.refused("runner_full");
  m.observe_start_latency(0.03);
  m.observe_queue_wait(2);
  m.set_running(1);
  char path[] = "/tmp/motor-metrics-promtool-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = m.exposition();
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string cmd = std::string("promtool check metrics < ") + path + " 2>&1";
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    const int status = pclose(f);
    EXPECT_EQ(status, 0) << out;
  } else {
    ADD_FAILURE() << "popen failed";
  }
  unlink(path);
  EXPECT_EQ(out, "");
}

// ---- The textfile for node_exporter. ----

class TextfileTest : public test::TempDirTest {
 protected:
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") out.push_back(n);
      }
      closedir(d);
    }
    return out;
  }
  static std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

TEST_F(TextfileTest, WritesAtomicallyWithMode0644AndNoTempLeft) {
  Metrics m;
  m.job_finished("exit");
  const std::string path = dir_ + "/motor.prom";
  const mode_t old_umask = umask(077);  // the mode must not depend on the umask
  const Status s = write_textfile(path, m.exposition());
  umask(old_umask);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(entries(), std::vector<std::string>{"motor.prom"});
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(slurp(path), m.exposition());
  must_parse(slurp(path));

  // Replacing: a new inode renamed over the old (a reader holding the old file sees it whole).
  m.job_finished("exit");
  ASSERT_TRUE(write_textfile(path, m.exposition()).ok());
  struct stat st2 {};
  ASSERT_EQ(stat(path.c_str(), &st2), 0);
  EXPECT_NE(st.st_ino, st2.st_ino);
  EXPECT_EQ(slurp(path), m.exposition());
  EXPECT_EQ(entries(), std::vector<std::string>{"motor.prom"});
  const Parsed p = must_parse(slurp(path));
  EXPECT_EQ(find_sample(p, "motor_jobs_finished_total", {{"outcome", "exit"}})->value, 2);
}

TEST_F(TextfileTest, FailureLeavesTheOldFileAndNoTemp) {
  const std::string path = dir_ + "/motor.prom";
  ASSERT_TRUE(write_textfile(path, "# TYPE a gauge\na 1\n").ok());
  // A target that is a non-empty directory cannot be renamed over.
  const std::string blocked = dir_ + "/blocked.prom";
  ASSERT_EQ(mkdir(blocked.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((blocked + "/x").c_str(), 0755), 0);
  const Status s = write_textfile(blocked, "x\n");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, "io");
  rmdir((blocked + "/x").c_str());
  rmdir(blocked.c_str());
  EXPECT_EQ(entries(), std::vector<std::string>{"motor.prom"});
  EXPECT_EQ(slurp(path), "# TYPE a gauge\na 1\n");
  // A missing directory is an error naming the path.
  const Status missing = write_textfile(dir_ + "/nope/motor.prom", "x\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find(dir_ + "/nope/motor.prom"), std::string::npos) << missing.error().message;
}

}  // namespace
}  // namespace motor::runner
