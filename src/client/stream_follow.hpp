// Following a job's stream (exec.run, exec.attach) to its terminal record, as `motor run` and
// `motor attach` do: output to stdout/stderr, Ctrl-C cancels, a broken connection is resumed
// from the last seq + 1 (a job is never run twice), and what exec-remote/v1 tells a caller to do
// with records, outcomes, kills and streams it does not know.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "client/cli.hpp"
#include "client/connection.hpp"

namespace motor::client {

struct FollowStart {
  int64_t request_id = 0;
  std::string job_id;     // "" for exec.run: the accepted record names it
  int64_t last_seq = 0;   // the last seq already seen
  int secret_fd = -1;     // run --direct --secret-file: where the secret goes (closed here)
  std::optional<std::string> secret;  // attach: the direct job's secret
};

// (ext) Asks the runner for binary output frames (protocol/output_frame.hpp) on this session: a
// runner.hello with request id 0, not waited for (the follow skips its reply). An older runner
// ignores the ask and sends JSON records, which the follow reads all the same.
Status ask_binary_output(Connection& conn);

// Returns the client's exit status.
int follow_stream(const CliOptions& o, Connection& conn, FollowStart start);

// The line `motor` prints on stderr for a terminal record ("" for none): a refusal with its
// reason and detail, a kill, a lost job, or an outcome this client does not know, by its name.
std::string describe_terminal(const protocol::Message& m);

// Where an output chunk's bytes go: stdout only for "stdout"; "stderr" and any stream label
// this client does not know go to stderr (their bytes are delivered, never mixed into stdout).
int output_fd_for(std::string_view stream);

}  // namespace motor::client
