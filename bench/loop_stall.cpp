// Issue 20's loop row: the runner's worst loop stall while 20 jobs are submitted at once, with
// 1,000 and with 10,000 finished jobs in its table, against the same burst on a runner whose
// table is empty (bench/README.md). Three runners, rounds interleaved between them; the runner's
// own meter (runner.status loop_worst_stall_us, reset before each burst) gives each figure.
//
// The tables are seeded as an upgraded host's would be: a state.json of N finished jobs (each
// with a real terminal record taken from a job run first), migrated into state.db at start.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/job_id.hpp"
#include "runner_bench.hpp"
#include "stall_burst.hpp"
#include "stats.hpp"
#include "support/runner_harness.hpp"

namespace {

using motor::bench::median;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

constexpr const char* kConfig = "max_running_jobs = 64\nfinished_jobs_kept = 20000\n";

// The terminal record of one real job, to copy into the seeded rows.
std::string one_terminal(const RunnerProcess& runner) {
  RawClient c(runner.socket());
  c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true"}})");
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(30000));
    if (!f) return "";
    if (json_field(*f, "/type") == "terminal") return *f;
  }
}

bool seed(const RunnerProcess& runner, size_t jobs, const std::string& terminal) {
  const std::string old_id = json_field(terminal, "/job_id");
  std::string text = R"({"version":1,"draining":false,"jobs":[)";
  for (size_t i = 0; i < jobs; ++i) {
    auto id = motor::new_job_id();
    if (!id) return false;
    std::string t = terminal;
    for (size_t at = t.find(old_id); at != std::string::npos; at = t.find(old_id, at + id->size())) {
      t.replace(at, old_id.size(), *id);
    }
    if (i) text.push_back(',');
    text += fmt::format(R"({{"job_id":"{}","caller":"root","workspace_key":"default","summary":"true","state":"finished",)"
                        R"("cgroup":"","created_at_ms":1,"started_at_ms":2,"terminal":{}}})",
                        *id, t);
  }
  text += "]}\n";
  mkdir(runner.state_dir().c_str(), 0700);
  motor::test::write_file(runner.state_dir() + "/state.json", text);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const auto wanted = motor::bench::rounds_to_run(argc, argv, 9);
  if (!wanted) return 1;
  const int rounds = *wanted;
  // The host's floor (stall_probe.hpp): by default a quarter of the goal's 2 ms in CPU, every 5 ms;
  // MOTOR_BENCH_PROBE_US sets the piece (as much as the runner's busiest iteration, to compare
  // like with like).
  const char* piece = std::getenv("MOTOR_BENCH_PROBE_US");
  motor::bench::StallProbe probe(piece ? std::strtoull(piece, nullptr, 10) : 500, 5);
  RunnerProcess empty(kConfig), thousand(kConfig), ten_thousand(kConfig);
  if (!motor::bench::start_runner(empty)) return 1;
  const std::string terminal = one_terminal(empty);
  if (terminal.empty() || !seed(thousand, 1000, terminal) || !seed(ten_thousand, 10000, terminal)) {
    fmt::print(stderr, "bench: could not seed the tables\n");
    return 1;
  }
  for (RunnerProcess* r : {&thousand, &ten_thousand}) {
    if (!motor::bench::start_runner(*r, "a seeded runner")) return 1;
  }
  // Per table: the wall figure (the goal's) and the CPU figure (the same iterations without
  // the time the loaded host kept the runner off the CPU).
  struct Table {
    const char* what;
    RunnerProcess* runner;
    std::vector<double> wall, cpu, probe;
  };
  std::vector<Table> tables = {{"empty table", &empty, {}, {}, {}},
                               {"1,000 finished jobs in the table", &thousand, {}, {}, {}},
                               {"10,000 finished jobs in the table", &ten_thousand, {}, {}, {}}};
  for (int round = 0; round < rounds; ++round) {
    for (Table& t : tables) {
      const auto stall = motor::bench::stall_of_burst(t.runner->socket(), probe.running() ? &probe : nullptr);
      t.wall.push_back(stall.wall_us);
      t.cpu.push_back(stall.cpu_us);
      t.probe.push_back(stall.probe_us);
    }
  }
  auto max_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  fmt::print("loop worst stall while 20 jobs are submitted at once, {} interleaved rounds:\n", rounds);
  for (const Table& t : tables) {
    fmt::print("  {:<34} median {:8.0f} us   max {:8.0f} us   (CPU of the busiest iteration: median {:6.0f} us, max {:6.0f} us)\n",
               t.what, median(t.wall), max_of(t.wall), median(t.cpu), max_of(t.cpu));
  }
  if (probe.running()) {
    fmt::print("the host's floor: the longest wall time a piece of {} us of CPU (every 5 ms, a process of the bench's own) took in the same bursts:\n",
               probe.work_us());
    for (const Table& t : tables) {
      fmt::print("  {:<34} median {:8.0f} us   max {:8.0f} us   (ratio runner / probe, medians: {:.2f})\n", t.what, median(t.probe),
                 max_of(t.probe), median(t.wall) / median(t.probe));
    }
  }
  const double empty_median = median(tables[0].wall);
  fmt::print("  ratio 1,000 jobs / empty table (median): {:.2f}\n", median(tables[1].wall) / empty_median);
  fmt::print("  ratio 10,000 jobs / empty table (median): {:.2f}\n", median(tables[2].wall) / empty_median);
  for (const Table& t : {tables[1], tables[2]}) {
    const double m = median(t.wall);
    fmt::print("  goal <= 2 ms ({}): {} ({:.1f} ms; CPU {:.1f} ms)\n", t.what, m <= 2000 ? "met" : "not met", m / 1000,
               median(t.cpu) / 1000);
  }
  for (const Table& t : tables) motor::bench::print_slow_calls(t.runner->log(), t.what);
  empty.stop();
  thousand.stop();
  ten_thousand.stop();
  return 0;
}
