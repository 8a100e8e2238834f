// What the conformance suite's runner-level tests share: an exec.run stream on a connection of
// its own and its last frame. Tests only.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "support/runner_harness.hpp"

namespace motor::test {

// The exec.run stream of `params` on a new connection, up to its terminal record.
inline std::vector<std::string> run_stream(const RunnerProcess& runner, const std::string& params) {
  RawClient c(runner.socket());
  if (!c.connected() || !c.send_frame(R"({"id":1,"method":"exec.run","params":)" + params + "}")) return {};
  return read_until_terminal(c);
}

inline std::string last_frame(const std::vector<std::string>& frames) { return frames.empty() ? "<none>" : frames.back(); }

// Kills the runner (SIGKILL), starts it again on the same state and returns the terminal record
// an exec.attach of `job_id` then gets ("<none>" if the runner did not come back).
inline std::string terminal_after_a_crash(RunnerProcess& runner, const std::string& job_id) {
  runner.kill9();
  if (!runner.start()) return "<none>";
  RawClient c(runner.socket());
  if (!c.send_frame(fmt::format(R"({{"id":1,"method":"exec.attach","params":{{"job_id":"{}"}}}})", job_id))) return "<none>";
  return last_frame(read_until_terminal(c));
}

}  // namespace motor::test
