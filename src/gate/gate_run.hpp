// `motor-runner gate`: the operator isolation tests (issue 5, docs/server-gate.md).
//
// Host checks first; then a real `motor-runner serve` is started from this executable with the
// operator's config (on a temporary state directory and socket, and a cgroup parent of its own so
// it never touches a production runner's jobs), every attack of the catalogue is submitted to it
// as an exec.run and judged, and everything the gate made is stopped and removed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "gate/job_transport.hpp"
#include "motor/expected.hpp"

namespace motor::gate {

struct GateOptions {
  std::optional<std::string> config_path;  // the --config the runner would get (nullopt: the embedded default)
  std::optional<std::string> state_dir;    // --state-dir: use this state directory instead of a temporary one
  bool json = false;
  // --attack ID[,ID]: run only these attacks (empty: every attack). Host checks always run.
  std::vector<std::string> attacks;
  // The motor-runner executable the gate starts its runner from ("" = this executable).
  std::string runner_exe;
  // The path the attacks' jobs take (null: exec.run on the gate's own session).
  std::shared_ptr<JobTransport> transport;
};

// Every attack id of the catalogue, in the order the gate runs them.
std::vector<std::string> attack_ids();

// --attack's value (a comma list; the flag may repeat) onto `attacks`; an unknown id is an error
// that lists the ids.
Status add_attack_list(std::string_view list, std::vector<std::string>& attacks);

// Returns the process exit code: 0 when every check passed, nothing got through, nothing was
// inconclusive and nothing was skipped without a host-level reason; 1 otherwise; 2 when the gate
// could not run its attacks at all (the runner did not start).
int run_gate(const config::Config& config, const GateOptions& options);

}  // namespace motor::gate
