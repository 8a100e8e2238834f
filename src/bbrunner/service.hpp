// buildbarn.runner.Runner served by motor-bb-runner: one instance per listening socket, each
// with the network policy that socket stands for (docs/buildbarn.md).
#pragma once

#include "bbrunner/action.hpp"
#include "bbrunner/build_directory.hpp"
#include "runner.grpc.pb.h"

namespace motor::bbrunner {

class RunnerService final : public buildbarn::runner::Runner::Service {
 public:
  RunnerService(RunSettings settings, const BuildDirectory& build) : settings_(std::move(settings)), build_(build) {}

  // Ready when the path bb_worker names exists in the build directory and motor-runner answers,
  // is not draining or shutting down, and has its free-space floor (UNAVAILABLE otherwise).
  grpc::Status CheckReadiness(grpc::ServerContext* context, const buildbarn::runner::CheckReadinessRequest* request,
                              google::protobuf::Empty* reply) override;
  grpc::Status Run(grpc::ServerContext* context, const buildbarn::runner::RunRequest* request,
                   buildbarn::runner::RunResponse* reply) override;

 private:
  RunSettings settings_;
  const BuildDirectory& build_;
};

}  // namespace motor::bbrunner
