// The capacity bench's report: the tables on stdout, the verdicts and rule of thumb, and
// capacity.json, capacity.dat, capacity.gp (and capacity.svg where gnuplot is installed).
#include "capacity_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "capacity_host.hpp"
#include "support/runner_harness.hpp"

namespace motor::bench::capacity {

std::vector<const Level*> Report::of(const std::string& system) const {
  std::vector<const Level*> v;
  for (const Level& l : results) {
    if (l.system == system) v.push_back(&l);
  }
  return v;
}

const Level* Report::at(const std::string& system, int clients) const {
  for (const Level& l : results) {
    if (l.system == system && l.clients == clients) return &l;
  }
  return nullptr;
}

double Report::cores() const {
  return static_cast<double>(host.usable_cpus > 0 ? host.usable_cpus : host.online);
}

namespace {

// Every system's levels, each figure also as a ratio to its single-client level.
void print_system_tables(const Report& report) {
  auto of = [&](const std::string& system) { return report.of(system); };
  for (const System& s : report.systems) {
    const auto ls = of(s.name);
    const Level& b = *ls.front();
    const double b_thr = b.jobs_per_s(), b_s50 = percentile(b.own_start(), 0.5);
    const double b_cpu = percentile(b.wall_ms_by_kind[1], 0.5);
    fmt::print("\n{}: start = {}; x = ratio to its {}-client level\n", s.name, s.note, b.clients);
    fmt::print("{:>7} {:>5} {:>7} {:>6} | {:>9} {:>9} {:>6} {:>6} | {:>9} {:>9} | {:>9} {:>7} | {:>7} {:>10} | {}\n", "clients",
               "done", "jobs/s", "x", "start p50", "start p99", "x p50", "x p99", "1st-byte50", "1st-byte99", "wall p50",
               "cpu-job x", "running", "host busy", "failures");
    for (const Level* l : ls) {
      std::string failures;
      for (const auto& [reason, count] : l->failures) failures += fmt::format("{}{}={}", failures.empty() ? "" : " ", reason, count);
      const double s50 = percentile(l->own_start(), 0.5), s99 = percentile(l->own_start(), 0.99);
      fmt::print("{:>7} {:>5} {:>7.2f} {:>6} | {:>7}ms {:>7}ms {:>6} {:>6} | {:>7}ms {:>7}ms | {:>7}ms {:>9} | {:>7.2f} {:>4.2f} cores | {}\n",
                 l->clients, l->completed, l->jobs_per_s(), ratio(l->jobs_per_s(), b_thr), ms(s50), ms(s99), ratio(s50, b_s50),
                 ratio(s99, b_s50), ms(l->first_p50()), ms(percentile(l->first_ms, 0.99)), ms(percentile(l->wall_ms, 0.5)),
                 ratio(percentile(l->wall_ms_by_kind[1], 0.5), b_cpu), l->avg_running,
                 l->host_busy_cores(), failures.empty() ? "none" : failures);
    }
  }
}

void print_motor_cost(const Report& report) {
  auto of = [&](const std::string& system) { return report.of(system); };
  const double runner_rss_idle = report.runner.rss_idle;
  const auto motor_levels = of("motor");
  fmt::print("\nmotor-runner's own cost (idle RSS after warm-up {:.1f} MiB):\n", runner_rss_idle);
  fmt::print("{:>7} | {:>9} {:>9} | {:>9} {:>11} | {:>8} {:>8} {:>13} | {:>10} {:>11} | {:>6} | {}\n", "clients", "qwait p50",
             "qwait p99", "CPU %core", "%core/job", "RSS avg", "RSS peak", "MiB/run. job", "loop stall", "stall/start", "load1",
             "runner.status means: running, queued (max), CPUs claimed; loop thread's run-queue wait");
  const double motor_b_s50 = percentile(motor_levels.front()->start_ms, 0.5);
  for (const Level* l : motor_levels) {
    const double cpu_pct = 100.0 * l->runner_cpu_s / l->elapsed;
    fmt::print("{:>7} | {:>7}ms {:>7}ms | {:>9.1f} {:>11} | {:>6.1f}Mi {:>6.1f}Mi {:>13} | {:>8.1f}ms {:>11} | {:>6.2f} | {:.1f}, {:.1f} ({:.0f}), {:.1f}; {:.1f}% of the time\n",
               l->clients, ms(percentile(l->queue_wait_ms, 0.5)), ms(percentile(l->queue_wait_ms, 0.99)), cpu_pct,
               l->avg_running > 0 ? fmt::format("{:.2f}", cpu_pct / l->avg_running) : "-", l->runner_rss_mean,
               l->runner_rss_peak,
               l->avg_running > 0 ? fmt::format("{:.2f}", l->runner_mib_per_running_job()) : "-",
               l->stall_us / 1000.0, ratio(l->stall_us / 1000.0, motor_b_s50), l->load1_after, l->status_running,
               l->status_queue, l->status_queue_max, l->status_cpus_claimed, l->runner_runq_wait_pct);
  }
  fmt::print("calls the runner logged as stalling its loop (>= 5 ms), per level: what n=count p50/max ms\n");
  for (const Level* l : motor_levels) {
    std::string calls;
    for (const auto& [what, v] : l->slow_calls) {
      calls += fmt::format("{}{} n={} {:.0f}/{:.0f}", calls.empty() ? "" : "; ", what, v.size(), percentile(v, 0.5),
                           *std::max_element(v.begin(), v.end()));
    }
    fmt::print("{:>7} | {}\n", l->clients, calls.empty() ? "none" : calls);
  }
}

void print_peer_ratios(const Report& report) {
  const auto& systems = report.systems;
  const auto& levels = report.levels;
  auto at = [&](const std::string& system, int clients) { return report.at(system, clients); };
  if (systems.size() > 1) {
    fmt::print("\nmotor against the peers at the same level (ratio motor / peer: first-byte < 1 = motor's jobs begin sooner; jobs/s > 1 = motor completes more):\n");
    fmt::print("{:>7}", "clients");
    for (size_t i = 1; i < systems.size(); ++i) {
      fmt::print(" | {:>10} {:>10} {:>11}", "1st-byte50", "1st-byte99", "jobs/s");
    }
    fmt::print("\n{:>7}", "");
    for (size_t i = 1; i < systems.size(); ++i) fmt::print(" | {:^34}", "vs " + systems[i].name);
    fmt::print("\n");
    for (int clients : levels) {
      const Level* m = at("motor", clients);
      fmt::print("{:>7}", clients);
      for (size_t i = 1; i < systems.size(); ++i) {
        const Level* p = at(systems[i].name, clients);
        fmt::print(" | {:>10} {:>10} {:>11}", ratio(m->first_p50(), p->first_p50()),
                   ratio(percentile(m->first_ms, 0.99), percentile(p->first_ms, 0.99)), ratio(m->jobs_per_s(), p->jobs_per_s()));
      }
      fmt::print("\n");
    }
  }
}

std::vector<Verdict> print_verdicts(const Report& report) {
  const auto& systems = report.systems;
  auto of = [&](const std::string& system) { return report.of(system); };
  const double cores = report.cores();
  fmt::print("\nload average after: {} (before: {})\n", report.host.load_after, report.host.load_before);
  std::vector<Verdict> verdicts;
  for (const System& s : systems) {
    const auto ls = of(s.name);
    Verdict v;
    v.system = s.name;
    v.saturated = saturation_level(ls);
    v.bounded = latency_bounded_level(ls);
    for (const Level* l : ls) {
      if (l->jobs_per_s() > v.peak) {
        v.peak = l->jobs_per_s();
        v.peak_at = l->clients;
      }
    }
    v.peak_x = ls.front()->jobs_per_s() > 0 ? v.peak / ls.front()->jobs_per_s() : NAN;
    verdicts.push_back(v);
    fmt::print("{:>6}: throughput {}; peak {:.2f} jobs/s at {} clients = {:.2f}x one client; starts stay within 2x (p50) / 4x "
               "(p99) of one client's median up to {} clients\n",
               s.name,
               v.saturated ? fmt::format("saturates at {} clients ({:.1f} per CPU): the next level adds < 10%", v.saturated,
                                         v.saturated / cores)
                           : std::string("does not saturate within the measured levels"),
               v.peak, v.peak_at, v.peak_x, v.bounded ? std::to_string(v.bounded) : std::string("no"));
  }
  for (size_t i = 1; i < verdicts.size(); ++i) {
    fmt::print("motor's peak throughput is {:.2f}x {}'s in this run\n", verdicts[0].peak / verdicts[i].peak,
               verdicts[i].system);
  }
  return verdicts;
}

RuleOfThumb print_rule_of_thumb(const Report& report, const std::vector<Verdict>& verdicts) {
  const auto& levels = report.levels;
  const auto motor_levels = report.of("motor");
  auto at = [&](const std::string& system, int clients) { return report.at(system, clients); };
  const double cores = report.cores();
  const int usable_cpus = report.host.usable_cpus;
  const std::string& load_before = report.host.load_before;
  // Memory per job: what admission reserves (the job's cap) plus the runner's own share.
  const Verdict& mv = verdicts[0];
  double runner_mib_per_job = 0;
  {
    double worst = 0;
    for (const Level* l : motor_levels) {
      if (l->avg_running >= 1 && std::isfinite(l->runner_mib_per_running_job())) {
        worst = std::max(worst, l->runner_mib_per_running_job());
      }
    }
    runner_mib_per_job = worst;
  }
  const int knee = mv.saturated ? mv.saturated : levels.back();
  const double jobs_per_core_thr = knee / cores;
  const double jobs_per_core_lat = mv.bounded / cores;
  const Level* knee_level = at("motor", knee);
  const double cpu_pct_per_job =
      knee_level && knee_level->avg_running > 0 ? 100.0 * knee_level->runner_cpu_s / knee_level->elapsed / knee_level->avg_running : NAN;
  const std::string rule = fmt::format(
      "plan {:.1f} concurrent jobs per core for throughput ({}), "
      "{:.1f} per core where callers need starts within 2x of a single client's; memory per job = the job's cap "
      "(what admission reserves: default_memory, or the request's `memory`) + {:.2f} MiB of runner memory per running "
      "job; the runner itself costs {:.1f}% of a core per running job at that concurrency",
      jobs_per_core_thr,
      mv.saturated ? fmt::format("beyond {} at once this host completed no more", knee)
                   : fmt::format("a lower bound: throughput still grew at {}, the highest level measured", knee),
      jobs_per_core_lat, std::max(runner_mib_per_job, 0.0), cpu_pct_per_job);
  const std::string assumptions = fmt::format(
      "jobs like this mix (sub-second shell jobs: a quarter CPU-bound, a quarter output-heavy, a quarter under a 256 MiB "
      "cap); {} usable CPUs, load average {} before the run (other tenants' work shares the cores); runner config as "
      "printed (cpu_oversubscription lets more jobs than cores run, so admission is not the limit); for long CPU-bound "
      "jobs the per-core figure tends to 1 and only the memory rule carries over",
      usable_cpus, load_before);
  fmt::print("\nrule of thumb: {}\nassumptions: {}\n", rule, assumptions);
  return {jobs_per_core_thr, jobs_per_core_lat, runner_mib_per_job, cpu_pct_per_job, rule, assumptions};
}

// One level's object in capacity.json; b is the same system's single-client level.
std::string level_json(const Level& l, const Level& b) {
  const double b_s50 = percentile(b.own_start(), 0.5);
  std::string failures;
  for (const auto& [reason, count] : l.failures) failures += fmt::format("{}\"{}\":{}", failures.empty() ? "" : ",", json_escape(reason), count);
  std::string by_kind;
  for (size_t k = 0; k < kKindCount; ++k) {
    by_kind += fmt::format(R"({}"{}":{})", k ? "," : "", kKinds[k].name, num(percentile(l.wall_ms_by_kind[k], 0.5), 1));
  }
  const double cpu_pct = 100.0 * l.runner_cpu_s / l.elapsed;
  std::string slow;
  for (const auto& [what, v] : l.slow_calls) {
    slow += fmt::format(R"({}"{}":{{"n":{},"p50_ms":{},"max_ms":{}}})", slow.empty() ? "" : ",", json_escape(what), v.size(),
                        num(percentile(v, 0.5), 1), num(*std::max_element(v.begin(), v.end()), 1));
  }
  return fmt::format(
      R"({{"system":"{}","clients":{},"seconds":{},"elapsed_s":{},"completed":{},"finished":{},"jobs_per_s":{},"jobs_per_s_x":{},)"
      R"("start_ms_p50":{},"start_ms_p99":{},"start_p50_x":{},"start_p99_x":{},"first_output_ms_p50":{},"first_output_ms_p99":{},)"
      R"("wall_ms_p50":{},"wall_ms_p99":{},"wall_ms_p50_by_kind":{{{}}},"queue_wait_ms_p50":{},"queue_wait_ms_p99":{},)"
      R"("avg_running":{},"host_cpu_s_per_job":{},"runner_cpu_pct_core":{},"runner_cpu_pct_core_per_running_job":{},)"
      R"("runner_runqueue_wait_pct":{},"status_running_mean":{},"status_queue_depth_mean":{},"status_queue_depth_max":{},"status_cpus_claimed_mean":{},"runner_rss_mib_before":{},"runner_rss_mib_mean":{},"runner_rss_mib_peak":{},"runner_mib_per_running_job":{},"loop_worst_stall_us":{},"load1_after":{},"failures":{{{}}},"slow_calls":{{{}}},"samples":{}}})",
      l.system, l.clients, l.seconds, num(l.elapsed, 2), l.completed, l.finished, num(l.jobs_per_s(), 3),
      ratio(l.jobs_per_s(), b.jobs_per_s()) == "-" ? "null" : ratio(l.jobs_per_s(), b.jobs_per_s()),
      num(percentile(l.own_start(), 0.5)), num(percentile(l.own_start(), 0.99)),
      num(percentile(l.own_start(), 0.5) / b_s50), num(percentile(l.own_start(), 0.99) / b_s50), num(l.first_p50()),
      num(percentile(l.first_ms, 0.99)), num(percentile(l.wall_ms, 0.5), 1), num(percentile(l.wall_ms, 0.99), 1), by_kind,
      num(percentile(l.queue_wait_ms, 0.5), 1), num(percentile(l.queue_wait_ms, 0.99), 1), num(l.avg_running),
      num(l.finished ? l.host_cpu_s / l.finished : NAN, 3), num(cpu_pct, 1),
      num(l.avg_running > 0 ? cpu_pct / l.avg_running : NAN), num(l.runner_runq_wait_pct, 1), num(l.status_running), num(l.status_queue),
      num(l.status_queue_max, 0), num(l.status_cpus_claimed), num(l.runner_rss_before, 1), num(l.runner_rss_mean, 1), num(l.runner_rss_peak, 1),
      num(l.runner_mib_per_running_job()), num(l.stall_us, 0),
      l.load1_after, failures, slow, l.own_start().size());
}

void write_json(const Report& report, const std::vector<Verdict>& verdicts, const RuleOfThumb& rule_of_thumb) {
  const HostFacts& h = report.host;
  const RunnerFacts& rf = report.runner;
  std::string j = "{";
  j += fmt::format(R"("seconds_per_level":{},"levels":[{}],"job_prefix":"{}",)", report.seconds, fmt::join(report.levels, ","),
                   json_escape(g_job_prefix));
  j += fmt::format(
      R"("host":{{"online_cpus":{},"usable_cpus":{},"cpu_model":"{}","mem_total_kib":{},"mem_available_kib":{},"kernel":"{}","cgroup_layout":"{}","loadavg_before":"{}","loadavg_after":"{}"}},)",
      h.online, h.usable_cpus, json_escape(h.model), h.mem_total_kib, h.mem_avail_kib, json_escape(h.kernel),
      json_escape(h.cgroup_layout), h.load_before, h.load_after);
  j += fmt::format(R"("runner":{{"version":"{}","config":"{}","rss_idle_mib":{},"rss_end_mib":{}}},)", json_escape(rf.version),
                   json_escape(rf.config), num(rf.rss_idle, 1), num(rf.rss_end, 1));
  j += R"("mix":[)";
  for (size_t k = 0; k < kKindCount; ++k) {
    j += fmt::format(R"({}{{"kind":"{}","command":"{}","memory":{},"stands_for":"{}"}})", k ? "," : "", kKinds[k].name,
                     json_escape(kKinds[k].command), kKinds[k].memory ? fmt::format("\"{}\"", kKinds[k].memory) : "null",
                     json_escape(kKinds[k].stands_for));
  }
  j += fmt::format(R"(],"peers":{{"bwrap":"{}","podman":"{}"}},"results":[)", json_escape(report.bwrap_status),
                   json_escape(report.podman_status));
  bool first = true;
  for (const Level& l : report.results) {
    j += fmt::format("{}{}", first ? "" : ",", level_json(l, *report.of(l.system).front()));
    first = false;
  }
  j += R"(],"verdicts":[)";
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const Verdict& v = verdicts[i];
    j += fmt::format(
        R"({}{{"system":"{}","saturates_at_clients":{},"latency_bounded_clients":{},"peak_jobs_per_s":{},"peak_at_clients":{},"peak_x_single":{},"motor_peak_x":{}}})",
        i ? "," : "", v.system, v.saturated ? std::to_string(v.saturated) : "null", v.bounded, num(v.peak, 3), v.peak_at,
        num(v.peak_x), num(v.peak > 0 ? verdicts[0].peak / v.peak : NAN));
  }
  j += fmt::format(
      R"(],"rule_of_thumb":{{"jobs_per_core_throughput":{},"jobs_per_core_latency_bounded":{},"runner_mib_per_running_job":{},"runner_cpu_pct_core_per_running_job":{},"text":"{}","assumptions":"{}"}}}})",
      num(rule_of_thumb.jobs_per_core_thr), num(rule_of_thumb.jobs_per_core_lat), num(rule_of_thumb.runner_mib_per_job),
      num(rule_of_thumb.cpu_pct_per_job), json_escape(rule_of_thumb.text), json_escape(rule_of_thumb.assumptions));
  j += "\n";
  std::ofstream(report.out_dir + "/capacity.json") << j;
}

void write_plot_data(const Report& report) {
  auto of = [&](const std::string& system) { return report.of(system); };
  std::ofstream dat(report.out_dir + "/capacity.dat");
  for (const System& s : report.systems) {
    dat << "# " << s.name << ": clients jobs_per_s start_p50_ms start_p99_ms first_p50_ms first_p99_ms\n";
    for (const Level* l : of(s.name)) {
      dat << fmt::format("{} {} {} {} {} {}\n", l->clients, num(l->jobs_per_s(), 3), num(percentile(l->own_start(), 0.5)),
                         num(percentile(l->own_start(), 0.99)), num(l->first_p50()), num(percentile(l->first_ms, 0.99)));
    }
    dat << "\n\n";
  }
}

void write_gnuplot_script(const Report& report) {
  const auto& systems = report.systems;
  const auto& levels = report.levels;
  const HostFacts& h = report.host;
  std::string lat, thr;
  const char* colors[] = {"#1b6ac9", "#d9480f", "#2b8a3e"};
  for (size_t i = 0; i < systems.size(); ++i) {
    const std::string& n = systems[i].name;
    const char* c = colors[i % 3];
    if (n == "motor") {
      lat += fmt::format("'capacity.dat' index {} using 1:3 with linespoints lw 2 lc rgb '{}' title 'motor start p50 (started)', ", i, c);
      lat += fmt::format("'' index {} using 1:4 with linespoints lw 2 dt 2 lc rgb '{}' title 'motor start p99', ", i, c);
      lat += fmt::format("'' index {} using 1:5 with linespoints lw 1 dt 3 pt 6 lc rgb '{}' title 'motor first byte p50', ", i, c);
    } else {
      lat += fmt::format("'' index {} using 1:5 with linespoints lw 2 lc rgb '{}' title '{} first byte p50', ", i, c, n);
      lat += fmt::format("'' index {} using 1:6 with linespoints lw 2 dt 2 lc rgb '{}' title '{} first byte p99', ", i, c, n);
    }
    thr += fmt::format("{}index {} using 1:2 with linespoints lw 2 lc rgb '{}' title '{}', ", i ? "'' " : "'capacity.dat' ", i, c, n);
  }
  lat.resize(lat.size() - 2);
  thr.resize(thr.size() - 2);
  std::ofstream gp(report.out_dir + "/capacity.gp");
  gp << fmt::format(
      "# gnuplot capacity.gp (run in this directory): capacity.svg\n"
      "set terminal svg size 1200,500 dynamic font 'sans,11'\n"
      "set output 'capacity.svg'\n"
      "set multiplot layout 1,2 title \"Motor capacity: {} CPUs, {}, load {} before / {} after, {} s per level\"\n"
      "set logscale x 2\nset xrange [0.8:{}]\nset xtics ({})\nset xlabel 'concurrent clients'\nset grid\nset key top left font ',9'\n"
      "set logscale y\nset ylabel 'start latency (ms)'\nset title 'start latency'\nplot {}\n"
      "unset logscale y\nset yrange [0:*]\nset ylabel 'jobs per second'\nset title 'sustained throughput (jobs/s)'\nplot {}\n"
      "unset multiplot\n",
      h.usable_cpus, h.kernel, h.load_before.substr(0, h.load_before.find(' ')), h.load_after.substr(0, h.load_after.find(' ')),
      report.seconds,
      levels.back() * 1.25, fmt::join(levels, ","), lat, thr);
}

}  // namespace

void print_and_write_report(const Report& report) {
  print_system_tables(report);
  print_motor_cost(report);
  print_peer_ratios(report);
  const std::vector<Verdict> verdicts = print_verdicts(report);
  const RuleOfThumb rule = print_rule_of_thumb(report, verdicts);
  write_json(report, verdicts, rule);
  write_plot_data(report);
  write_gnuplot_script(report);
  const std::string& out_dir = report.out_dir;
  std::string plot_note;
  if (access("/usr/bin/gnuplot", X_OK) == 0) {
    auto r = motor::test::run_program({"/bin/sh", "-c", "cd '" + out_dir + "' && /usr/bin/gnuplot capacity.gp"});
    plot_note = r.exit_code == 0 ? out_dir + "/capacity.svg" : "gnuplot failed: " + trim(r.err);
  } else {
    plot_note = "not drawn: gnuplot is not installed (bench/setup installs gnuplot-nox)";
  }
  fmt::print("\njson: {}/capacity.json\nplot: {}\n", out_dir, plot_note);
}

}  // namespace motor::bench::capacity
