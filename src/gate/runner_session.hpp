// The gate's side of a runner session, over client::Connection (the protocol client `motor`
// uses): to the Unix socket (as root, the caller "root") or through a `motor-runner connect
// --caller NAME` bridge on a socket pair (the session acts as that caller). Every read has a
// deadline, and an interrupt (SIGINT/SIGTERM to the gate) ends the wait, so the gate never hangs
// on a runner that stopped answering and always gets to its clean-up.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/connection.hpp"
#include "motor/expected.hpp"
#include "protocol/messages.hpp"

namespace motor::gate {

// Set from the gate's SIGINT/SIGTERM handler; every wait in the gate checks it.
void set_interrupted();
bool interrupted();

// One job as the gate submits it (an exec.run).
struct JobRequest {
  std::vector<std::string> argv;      // run without a shell (preferred)
  std::string command;                // or a /bin/sh -c command line
  std::vector<std::pair<std::string, std::string>> env;
  std::string workspace_key;
  std::string cwd;                    // relative to the workspace; "" = its top
  int64_t timeout_s = 60;
  std::string memory;                 // "" = the runner's default
  int64_t cpus = 0;                   // 0 = the runner's default
  std::string network;                // "" = the runner's default (offline); "outbound"
  bool untrusted = false;             // (ext) only on a workspace whose change passed the screen
};

// Everything the runner said about one job.
struct JobResult {
  std::string error;                  // request error or transport failure; empty when the job ran its course
  std::string job_id;
  std::string out, err;               // decoded stdout / stderr
  std::string accepted_json, terminal_json;
  bool have_terminal = false;
  protocol::Outcome outcome;
  std::optional<std::string> killed;
  std::optional<std::string> refusal_detail;
  bool oom_killed = false;
  std::vector<std::string> env_not_forwarded;

  // "exit 0", "signal 9", "refused_before_start (reason): detail", ...
  std::string outcome_text() const;
  bool exited(int code) const {
    return have_terminal && outcome.kind == protocol::Outcome::Kind::kExit && outcome.code == code;
  }
};

// The terminal record's fields (outcome, killed, oom_killed, ...) into `r`.
void read_terminal_record(const protocol::Message& m, JobResult& r);

class RunnerSession {
 public:
  static Expected<std::unique_ptr<RunnerSession>> connect_socket(const std::string& socket_path);
  // Starts `self_exe connect --caller NAME --socket PATH` on a socketpair, as ssh would for a
  // forced command. The bridge exits when the session is closed.
  static Expected<std::unique_ptr<RunnerSession>> via_bridge(const std::string& self_exe, const std::string& socket_path,
                                                             const std::string& caller);
  ~RunnerSession();
  RunnerSession(const RunnerSession&) = delete;
  RunnerSession& operator=(const RunnerSession&) = delete;

  // A request and its one reply: the raw "result" JSON, or the error.
  Expected<std::string> call(std::string_view method, std::string_view params_json, int timeout_ms);

  // Submits a job and follows it to its terminal record (or the deadline). `on_first_output`
  // runs once, when the job's first output arrives (the job is running then).
  JobResult run(const JobRequest& request, int timeout_ms,
                const std::function<void(const std::string& job_id)>& on_first_output = {});

 private:
  RunnerSession(client::Connection connection, pid_t bridge) : connection_(std::move(connection)), bridge_(bridge) {}
  // The next message for request `id` (others are skipped), by `deadline_ms`.
  Expected<protocol::Message> next_for(int64_t id, int64_t deadline_ms);

  std::optional<client::Connection> connection_;
  pid_t bridge_ = -1;
};

// Milliseconds on the monotonic clock.
int64_t now_ms();

}  // namespace motor::gate
