// `motor-bb-runner gate`: the gate's attacks as bb_worker sends them. Each attack's job becomes a
// Run on a real motor-bb-runner (this executable, `serve`-d on sockets in the gate's directory)
// over the real runner.proto, with its workspace laid out as an input root in a build directory
// the way bb_worker lays one out, and its stdout/stderr read back from the files bb_worker names.
// So the gate measures every control on the path a Buildbarn action takes (docs/buildbarn.md).
//
// What bb_worker sees is what is judged: the reply's exit code, its POSIXResourceUsage and the
// Motor job record beside it (motor_job.proto: why the job was killed, OOM), or the call's
// status (DEADLINE_EXCEEDED is the runner's kill at the deadline; a refusal is its gRPC code and
// message). Attacks on inputs a Run does not have (callers, the change screen, the environment
// filter, the workspace scan) are reported as not applicable, with why.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gate/job_transport.hpp"

namespace motor::bbrunner {

class BbWorkerTransport final : public gate::JobTransport {
 public:
  // `bb_runner_exe`: the motor-bb-runner to serve Runs (this executable).
  explicit BbWorkerTransport(std::string bb_runner_exe);
  ~BbWorkerTransport() override;

  std::string name() const override { return "motor-bb-runner"; }
  Expected<std::string> prepare(const std::string& gate_dir) override;
  Status start(const std::string& runner_socket) override;
  Expected<std::string> workspace_dir(const std::string& key) override;
  gate::JobResult run(const gate::JobRequest& request, int timeout_ms,
                      const std::function<void(const std::string& job_id)>& on_first_output) override;
  std::optional<std::string> not_applicable(std::string_view id) const override;
  void stop() override;

  struct Server;  // one motor-bb-runner serving one memory and CPU shape (its flags)

 private:
  Expected<Server*> server_for(const std::string& memory, int64_t cpus);
  // Workspace `key`'s input root, relative to the build directory: under a name of its own, as
  // bb_worker names each action's directory (nothing the caller chose), made if absent.
  Expected<std::string> input_root(const std::string& key);
  // The running job's id, from the runner (the gate runs one job at a time), or "".
  std::string running_job_id() const;

  std::string exe_, gate_dir_, build_dir_, runner_socket_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::map<std::string, std::string> action_dirs_;  // workspace key -> its directory's name
  uint64_t runs_ = 0;
};

}  // namespace motor::bbrunner
