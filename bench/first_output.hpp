// One `/bin/echo x` job through a real runner, timed from sending exec.run to its first output
// record (what a caller waits for). Shared by the start-latency benchmarks.
#pragma once

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::bench {

// Microseconds, or -1 if the job did not run and exit 0.
// `network`: "" (the runner's default, offline) or "outbound".
inline double first_output_us_with_network(const std::string& socket, int id, const std::string& network) {
  using Clock = std::chrono::steady_clock;
  test::RawClient c(socket);
  if (!c.connected()) return -1;
  const auto t0 = Clock::now();
  c.send_frame(fmt::format(R"({{"id":{},"method":"exec.run","params":{{"argv":["/bin/echo","x"]{}}}}})", id,
                           network.empty() ? "" : fmt::format(R"(,"network":"{}")", network)));
  double first = -1;
  for (;;) {
    auto f = c.read_frame(std::chrono::milliseconds(10000));
    if (!f) return -1;
    const std::string type = test::json_field(*f, "/type");
    if (type == "output" && first < 0) first = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (type == "terminal") return test::json_field(*f, "/outcome/code") == "0" ? first : -1;
    if (!test::json_field(*f, "/error/code").starts_with("<")) return -1;
  }
}

inline double first_output_us(const std::string& socket, int id) { return first_output_us_with_network(socket, id, ""); }

}  // namespace motor::bench
