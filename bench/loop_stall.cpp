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
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  if (geteuid() != 0) {
    fmt::print(stderr, "bench: run as root (the runner creates cgroups and switches accounts)\n");
    return 1;
  }
  RunnerProcess empty(kConfig), thousand(kConfig), ten_thousand(kConfig);
  if (!empty.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", empty.log());
    return 1;
  }
  const std::string terminal = one_terminal(empty);
  if (terminal.empty() || !seed(thousand, 1000, terminal) || !seed(ten_thousand, 10000, terminal)) {
    fmt::print(stderr, "bench: could not seed the tables\n");
    return 1;
  }
  for (RunnerProcess* r : {&thousand, &ten_thousand}) {
    if (!r->start()) {
      fmt::print(stderr, "bench: a seeded runner did not start:\n{}\n", r->log());
      return 1;
    }
  }
  std::vector<double> s0, s1k, s10k;
  for (int round = 0; round < rounds; ++round) {
    s0.push_back(motor::bench::worst_stall_of_burst(empty.socket()));
    s1k.push_back(motor::bench::worst_stall_of_burst(thousand.socket()));
    s10k.push_back(motor::bench::worst_stall_of_burst(ten_thousand.socket()));
  }
  auto row = [](const char* what, const std::vector<double>& v) {
    fmt::print("  {:<34} median {:8.0f} us   max {:8.0f} us\n", what, median(v), *std::max_element(v.begin(), v.end()));
  };
  fmt::print("loop worst stall while 20 jobs are submitted at once, {} interleaved rounds:\n", rounds);
  row("empty table", s0);
  row("1,000 finished jobs in the table", s1k);
  row("10,000 finished jobs in the table", s10k);
  fmt::print("  ratio 1,000 jobs / empty table (median): {:.2f}\n", median(s1k) / median(s0));
  fmt::print("  ratio 10,000 jobs / empty table (median): {:.2f}\n", median(s10k) / median(s0));
  for (const auto& [what, v] : {std::pair{"1,000", &s1k}, std::pair{"10,000", &s10k}}) {
    fmt::print("  goal <= 2 ms with {} jobs: {} ({:.1f} ms)\n", what, median(*v) <= 2000 ? "met" : "not met",
               median(*v) / 1000);
  }
  empty.stop();
  thousand.stop();
  ten_thousand.stop();
  return 0;
}
