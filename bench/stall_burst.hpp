// The loop-stall measurement shared by motor_bench_start and motor_bench_loop: the runner's
// own meter (runner.status loop_worst_stall_us) reset, 20 clients each submit a job at the same
// moment, and once every job has ended, the worst stall one loop iteration had meanwhile.
#pragma once

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "stall_probe.hpp"
#include "support/runner_harness.hpp"

namespace motor::bench {

// The worst iteration of one burst, in microseconds: its wall time (runner.status
// loop_worst_stall_us) and, apart, the most CPU time one iteration used (loop_worst_cpu_us: what
// the runner computed, without the time a loaded host kept it waiting for a CPU). -1 if the
// runner did not answer. With a probe (stall_probe.hpp): the longest wall time its piece of work
// took during the same burst.
struct BurstStall {
  double wall_us = -1;
  double cpu_us = -1;
  double probe_us = -1;
};

inline BurstStall stall_of_burst(const std::string& socket, StallProbe* probe = nullptr) {
  using test::json_field;
  using test::RawClient;
  if (probe) probe->reset();
  {
    RawClient status(socket);
    status.send_frame(R"({"id":1,"method":"runner.status","params":{"reset_stall":true}})");
    status.read_frame();
  }
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 20; ++i) clients.push_back(std::make_unique<RawClient>(socket));
  for (int i = 0; i < 20; ++i) {
    clients[static_cast<size_t>(i)]->send_frame(
        fmt::format(R"({{"id":{},"method":"exec.run","params":{{"command":"echo started; sleep 0.2"}}}})", i));
  }
  for (auto& c : clients) {
    for (;;) {
      auto f = c->read_frame(std::chrono::milliseconds(30000));
      if (!f || json_field(*f, "/type") == "terminal" || json_field(*f, "/error/code")[0] != '<') break;
    }
  }
  const double probe_us = probe ? probe->worst_us() : -1;
  RawClient status(socket);
  status.send_frame(R"({"id":2,"method":"runner.status","params":{}})");
  auto reply = status.read_frame();
  if (!reply) return {};
  return {std::atof(json_field(*reply, "/result/loop_worst_stall_us").c_str()),
          std::atof(json_field(*reply, "/result/loop_worst_cpu_us").c_str()), probe_us};
}

// Prints how many calls the runner logged as stalling its loop (reactor::SlowCall, >= 5 ms) in
// `log`, and the first few of them.
inline void print_slow_calls(const std::string& log, std::string_view which) {
  size_t slow = 0, at = 0;
  std::string examples;
  while ((at = log.find("stalled the loop", at)) != std::string::npos) {
    const size_t begin = log.rfind('\n', at) + 1;
    const size_t end = log.find('\n', at);
    if (++slow <= 8) examples += "    " + log.substr(begin, end - begin) + "\n";
    at = end;
  }
  fmt::print("calls the runner ({}) logged as stalling its loop (>= 5 ms): {}\n{}", which, slow, examples);
  // With MOTOR_LOOP_TRACE_US set (the runners inherit it): each traced iteration, as logged.
  if (std::getenv("MOTOR_LOOP_TRACE_US") == nullptr) return;
  for (at = 0; (at = log.find("loop trace: ", at)) != std::string::npos;) {
    const size_t end = log.find('\n', at);
    fmt::print("    {}\n", log.substr(at, end - at));
    at = end;
  }
}

// The wall figure alone (motor_bench_start).
inline double worst_stall_of_burst(const std::string& socket) { return stall_of_burst(socket).wall_us; }

}  // namespace motor::bench
