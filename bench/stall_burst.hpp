// The loop-stall measurement shared by motor_bench_start and motor_bench_loop: the runner's
// own meter (runner.status loop_worst_stall_us) reset, 20 clients each submit a job at the same
// moment, and once every job has ended, the worst stall one loop iteration had meanwhile.
#pragma once

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::bench {

// Microseconds, or -1 if the runner did not answer.
inline double worst_stall_of_burst(const std::string& socket) {
  using test::json_field;
  using test::RawClient;
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
  RawClient status(socket);
  status.send_frame(R"({"id":2,"method":"runner.status","params":{}})");
  auto reply = status.read_frame();
  return reply ? std::atof(json_field(*reply, "/result/loop_worst_stall_us").c_str()) : -1;
}

}  // namespace motor::bench
