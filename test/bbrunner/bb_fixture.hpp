// Test support for motor-bb-runner: a real motor-runner (runner_harness) with a Buildbarn build
// directory, a real motor-bb-runner in front of it, and a gRPC client over the real runner.proto
// playing bb_worker: it lays out each action's directory the way bb_worker does (an input root,
// a temporary directory, the stdout/stderr files beside them) and calls CheckReadiness and Run.
// Everything is stopped and removed in the destructors, also when a test fails.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "motor_job.pb.h"
#include "resourceusage.pb.h"
#include "runner.grpc.pb.h"
#include "support/runner_harness.hpp"

namespace motor::test {

// One action's directory below the build directory, as bb_worker makes it: <name>/root (the
// input root, 0777 as bb_worker leaves it for a runner under another account), <name>/tmp,
// and <name>/stdout, <name>/stderr (not yet there: the runner creates them).
struct ActionDir {
  std::string name, path;
  std::string root() const { return path + "/root"; }
  std::string tmp() const { return path + "/tmp"; }
};

struct RunOutcome {
  grpc::Status status;
  buildbarn::runner::RunResponse reply;
  std::string stdout_text, stderr_text;
  // The POSIXResourceUsage in the reply (default if none).
  buildbarn::resourceusage::POSIXResourceUsage usage;
  bool has_usage = false;
  // The Motor job record beside it (motor_job.proto).
  motor::bbrunner::MotorJob motor_job;
  bool has_motor_job = false;
};

class BbFarm {
 public:
  // `runner_config` is added to the runner's config (bb_build_directory is set here);
  // `bb_flags` to motor-bb-runner's command line.
  explicit BbFarm(const std::string& runner_config = "", std::vector<std::string> bb_flags = {});
  ~BbFarm();
  BbFarm(const BbFarm&) = delete;
  BbFarm& operator=(const BbFarm&) = delete;

  bool start();  // the runner, then motor-bb-runner; false (with logs) if either fails
  RunnerProcess& runner() { return *runner_; }
  const std::string& build_dir() const { return build_dir_; }
  std::string bb_log() const;

  ActionDir make_action(const std::string& name, const std::map<std::string, std::string>& files = {});
  // bb_worker's Run for `action` with `argv` (working directory relative to the input root).
  buildbarn::runner::RunRequest request(const ActionDir& action, std::vector<std::string> argv,
                                        std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"}},
                                        const std::string& working_directory = "") const;
  RunOutcome run(const buildbarn::runner::RunRequest& request, std::chrono::milliseconds deadline = std::chrono::seconds(60),
                 bool outbound = false, grpc::ClientContext* context = nullptr);
  grpc::Status check_readiness(const std::string& path = "");

 private:
  std::unique_ptr<RunnerProcess> runner_;
  std::vector<std::string> bb_flags_;
  std::string dir_, build_dir_, socket_, outbound_socket_, bb_log_;
  pid_t bb_pid_ = -1;
  std::unique_ptr<buildbarn::runner::Runner::Stub> stub_, outbound_stub_;
};

}  // namespace motor::test
