// Another way for the gate's attacks to reach its runner: the jobs a front end of the runner
// makes (motor-bb-runner's Run, bbrunner/gate_transport.hpp), so the gate measures the controls
// on the path those jobs take. Without one, the attacks are exec.run requests on the gate's own
// session. The gate still starts, watches and cleans up the runner; the transport starts and
// stops what it puts in front of it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gate/runner_session.hpp"
#include "motor/expected.hpp"

namespace motor::gate {

class JobTransport {
 public:
  virtual ~JobTransport() = default;
  // How the report names the path ("motor-bb-runner").
  virtual std::string name() const = 0;
  // Before the gate runner starts: what the transport keeps goes under `gate_dir` (removed with
  // it); the config lines the runner needs for it (they replace the operator's keys of those names).
  virtual Expected<std::string> prepare(const std::string& gate_dir) = 0;
  // Once the gate runner answers on `runner_socket`.
  virtual Status start(const std::string& runner_socket) = 0;
  // The host directory a job of workspace `key` has as /workspace (made if absent).
  virtual Expected<std::string> workspace_dir(const std::string& key) = 0;
  // One job as the front end runs it, in the terms the gate judges (runner_session.hpp), mapped
  // from what the front end answers; `on_first_output` as RunnerSession::run.
  virtual JobResult run(const JobRequest& request, int timeout_ms,
                        const std::function<void(const std::string& job_id)>& on_first_output) = 0;
  // Why attack `id` cannot be made on this path (the front end has no such input), or nullopt.
  virtual std::optional<std::string> not_applicable(std::string_view id) const = 0;
  // Stops what start() started; the gate calls it before it stops the runner.
  virtual void stop() = 0;
};

}  // namespace motor::gate
