// The attack catalogue of `motor-runner gate`: each attack names the control it measures, runs a
// small script (a probe: src/gate/probes/<id>.py or .sh) as a real job through the gate's runner,
// and judges from the job's output, its terminal record and what the gate sees on the host
// whether the control held.
//
//   stopped      the control's own signature was seen (EROFS from a read-only mount, ENOENT for a
//                host path the empty root hides, EPERM from the seccomp filter, an OOM kill, ...)
//   GOT THROUGH  the attack succeeded, or failed only for some other reason (the control's
//                signature is missing: a flag is not evidence, the control must be what stops it)
//   skipped      the host or config lacks what the control needs (host_level), or the gate could
//                not prepare the attack (not host-level: the gate fails)
//   INCONCLUSIVE the job did not produce the result lines (the gate fails)
//
// The attacks are one table (attack_table.cpp), a row each; docs/server-gate.md lists them and
// says how to add one.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "gate/host_checks.hpp"
#include "gate/probe.hpp"
#include "gate/runner_session.hpp"
#include "motor/expected.hpp"

namespace motor::gate {

enum class Result { kStopped, kGotThrough, kSkipped, kInconclusive };
const char* result_name(Result r);       // "stopped", "GOT THROUGH", "skipped", "INCONCLUSIVE"
const char* result_json_name(Result r);  // "stopped", "got_through", "skipped", "inconclusive"

struct Verdict {
  Result result = Result::kInconclusive;
  std::string evidence;
  bool host_level = false;  // kSkipped only: the host or config lacks the feature
};

using RunJob = std::function<JobResult(const JobRequest&, int timeout_ms,
                                       const std::function<void(const std::string& job_id)>& on_first_output)>;

// What the gate prepared for the attacks and how they reach the runner and the host.
struct AttackEnv {
  const config::Config* config = nullptr;
  HostFacts facts;
  std::string self_exe;
  std::string socket_path, state_dir, gate_dir;
  std::string workspace_key;
  std::string workspace_root;  // the runner's workspace root on the host
  std::string workspace;       // <workspace_root>/<id of ("root", key)>: the gate's jobs' /workspace
  std::string other_workspace; // <workspace_root>/<id of (other_caller, key)>
  std::string outside_dir;     // a world-writable host directory beside the workspace
  std::string other_caller = "gate-other";
  std::string cgroup_parent;   // the gate runner's cgroup parent
  pid_t runner_pid = -1;
  int listener_fd = -1;
  int listener_port = 0;
  pid_t host_marker_pid = -1;
  std::string host_marker;     // digits in the command line of a host process the gate started
  uid_t job_uid = 0;
  std::string host_hostname;

  RunJob run_job;                                            // as the gate's own caller ("root")
  std::function<JobResult(const JobRequest&, int)> run_job_as_other;  // through `connect --caller gate-other`
  std::function<Expected<std::string>(std::string_view, std::string_view)> call;  // a request on a fresh session
  std::function<std::vector<pid_t>(const std::string&)> processes_with;  // host pids whose cmdline contains it
  std::function<std::string()> new_marker;                   // unique digits
};

// What the control needs from the host or config; without it the attack is skipped.
enum class Needs {
  kNothing,
  kX86_64,            // the probe calls syscalls by their x86_64 numbers
  kPidsController,
  kMemoryController,
  kCpusetController,
  kCaches,            // cache_paths configured
  kOutbound,          // outbound_network = true
  kRoot,              // the gate plants a root-owned file (not host-level: the gate must be root)
};

// One expected result line ("label=value" in the job's stdout): the values that mean the control
// held. A value ending in '*' matches as a prefix.
struct Expect {
  std::string label;
  std::vector<std::string> stopped;
};

// How the probe's job is asked for (exec.run fields beyond the command).
struct JobShape {
  int64_t timeout_s = 60;
  std::string memory{};   // "" = the runner's default
  int64_t cpus = 0;     // 0 = the runner's default
  std::string network{};  // "" = offline; "outbound"
};

struct Attack;
// Python assignments the probe reads (values from the gate: paths, pids, ports, markers).
using ProbeValues = std::string (*)(const AttackEnv&);
// An attack's own steps where the job's lines are not all the evidence (host state, listeners,
// a second job): runs the probe itself (attack_steps.hpp) and judges.
using AttackSteps = Verdict (*)(AttackEnv&, const Attack&);

// One row of the catalogue.
struct Attack {
  std::string_view id{}, control{}, description{};
  Needs needs = Needs::kNothing;
  const Probe* probe = nullptr;   // the job's script
  JobShape job{};
  std::vector<Expect> expects{};  // without `steps`: stopped when every label shows its signature
  std::vector<std::string> info{};  // labels shown beside the evidence, not judged
  ProbeValues values = nullptr;
  AttackSteps steps = nullptr;    // nullptr: run the probe, judge its lines by `expects`
};

// Every attack, in the order the gate runs them.
const std::vector<Attack>& attack_catalogue();
// The host feature a row needs, as the report says it ("" = none beyond a runner).
std::string needs_text(Needs needs);
// Why the attack cannot run here, or nullopt.
std::optional<Verdict> skip_reason(const Attack& attack, const AttackEnv& env);
Verdict run_attack(const Attack& attack, AttackEnv& env);

// Exposed for tests of the judge: "label=value" lines of a job's stdout.
std::map<std::string, std::string> parse_result_lines(const std::string& out);

}  // namespace motor::gate
