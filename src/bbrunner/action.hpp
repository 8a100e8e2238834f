// One Buildbarn RunRequest as one Motor job (docs/buildbarn.md): the exec.run request it
// becomes, and the wait for its terminal record, writing the job's output to the stdout and
// stderr files bb_worker named and cancelling the job when the gRPC call goes away.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "bbrunner/build_directory.hpp"
#include "runner.pb.h"

namespace motor::bbrunner {

struct RunSettings {
  std::string runner_socket;            // motor-runner's socket
  std::string network = "offline";      // offline | outbound: which socket the call came in on
  std::optional<int64_t> memory_bytes;  // each action's memory cap (the runner's default if absent)
  std::optional<int64_t> cpus;          // each action's whole cores (the runner's default if absent)
};

// The exec.run request (id 1) for `request`; `timeout_s` from the call's deadline, if it has one.
std::string exec_run_request(const buildbarn::runner::RunRequest& request, const RunSettings& settings,
                             const std::string& workspace_key, std::optional<int64_t> timeout_s);

// Seconds left until `deadline`, rounded up and at least 1; nullopt for no deadline.
std::optional<int64_t> timeout_from_deadline(std::chrono::system_clock::time_point deadline,
                                             std::chrono::system_clock::time_point now);

// Runs the action and fills `reply`; a cancelled call cancels the job and waits for its end.
grpc::Status run_action(const RunSettings& settings, const BuildDirectory& build, grpc::ServerContext& context,
                        const buildbarn::runner::RunRequest& request, buildbarn::runner::RunResponse& reply);

}  // namespace motor::bbrunner
