// Requests and their parameters, decoded with simdjson; replies and stream records, encoded with
// fmt. Field names follow exec-remote/v1 (docs/protocol.md); Motor's additions are marked (ext).
#pragma once

#include "motor/simdjson_fwd.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "motor/expected.hpp"
#include "protocol/json_writer.hpp"
#include "protocol/wire_enums.hpp"

namespace motor::protocol {

struct Request {
  int64_t id = 0;
  std::string method;
  std::string params_json = "{}";  // the params object as received (validated JSON)
};

// Decodes the envelope. On error, *id_out is set if the id could be read, so the error reply can
// name it. Errors are "bad_request" with a message naming the field.
Expected<Request> parse_request(simdjson::dom::parser& parser, std::string_view payload, std::optional<int64_t>* id_out);

// exec.run
struct RunParams {
  std::string workspace_key = "default";
  std::string repository_root;
  std::string cwd;                          // relative to the workspace; "" = its root
  std::optional<std::string> command;       // run by bash -c (/bin/sh -c without bash): runner/job_sandbox_policy.hpp
  std::vector<std::string> argv;            // (ext) run without a shell
  std::vector<std::pair<std::string, std::string>> env;
  std::optional<double> weight_hint;
  std::optional<int64_t> timeout_s;
  std::optional<int64_t> queue_wait_limit_s;
  std::vector<std::string> siblings;
  std::optional<int64_t> cpus;              // (ext)
  std::optional<int64_t> memory_bytes;      // (ext) "memory": bytes, or a string with K/M/G
  Network network = Network::kOffline;      // absent: offline; "outbound"; (ext) "offline"
  Platform platform = Platform::kLinux;     // absent: linux; "windows"
  // A network or platform string this runner does not know, as sent: the job is refused before
  // start (network_unsupported / platform_unsupported, this wire name as refusal_detail).
  std::optional<std::string> unknown_network, unknown_platform;
  bool direct = false;                      // (ext)
  Priority priority = Priority::kBatch;     // (ext) interactive | batch: the admission class
  bool untrusted = false;                   // (ext) refuse unless the workspace passed the change screen
};
Expected<RunParams> parse_run_params(simdjson::dom::parser& parser, std::string_view params_json,
                                     size_t max_argument_bytes);

// exec.cancel / exec.attach / exec.status with a job id
struct JobRef {
  std::string job_id;  // empty when absent and optional
  int64_t from_seq = 1;
  std::optional<std::string> secret;  // a direct job's secret (never echoed in any error)
};
Expected<JobRef> parse_job_ref(simdjson::dom::parser& parser, std::string_view params_json, bool job_id_required);

// One optional boolean parameter (runner.drain's "wait", runner.status's "metrics"...): absent or
// null is false; anything but a boolean is a bad_request naming the field.
Expected<bool> parse_flag(simdjson::dom::parser& parser, std::string_view params_json, std::string_view name);

// runner.identify (only from the runner's own account: `motor-runner connect`)
Expected<std::string> parse_identify(simdjson::dom::parser& parser, std::string_view params_json);

// workspace.prepare / workspace.upload / workspace.finish / workspace.drop (docs/protocol.md,
// "Workspaces"): one struct, each method reads the fields it needs.
struct WorkspaceParams {
  std::string workspace_key = "default";
  std::string repository_root;
  std::string tree_hash;               // prepare: the tree the workspace must hold
  std::string base_commit;             // prepare (exec-remote/v1): the commit the workspace must hold
  std::vector<std::string> siblings;
  std::string transfer_id;             // upload, finish
  std::optional<int64_t> offset;       // upload: where `data` goes in the bundle
  std::string data;                    // upload: the bundle bytes (decoded from base64)
  std::string commit;                  // finish: the bundle's commit
  std::optional<int64_t> bundle_bytes; // finish: the bundle's whole size
  bool untrusted = false;              // prepare (ext): screen the change before the checkout
  std::string screen_base;             // prepare (ext): the trusted base commit the change is screened from
};
Expected<WorkspaceParams> parse_workspace_params(simdjson::dom::parser& parser, std::string_view params_json);
// 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
bool is_object_id(std::string_view text);

// A job id: a UUID in canonical lowercase form.
bool is_job_id(std::string_view text);

// ---- replies ----
std::string encode_result(int64_t id, std::string_view result_json);
std::string encode_error(std::optional<int64_t> id, std::string_view code, std::string_view message);

// Stream records are stored once without a request id and sent with the id of each request that
// follows the job: {"type":...} becomes {"id":N,"type":...}.
std::string with_request_id(int64_t id, std::string_view record_json);

// ---- outcomes and records ----
struct Outcome {
  enum class Kind { kExit, kSignal, kCancelled, kRefusedBeforeStart, kOutcomeUnknown, kHistoryExpired };
  Kind kind = Kind::kOutcomeUnknown;
  int code = 0;        // kExit
  int signal = 0;      // kSignal
  std::string reason;  // kRefusedBeforeStart, as sent
  std::optional<RefusalReason> refusal;  // kRefusedBeforeStart: `reason` parsed (none: one we do not know)
};
void write_outcome(JsonWriter& w, const Outcome& outcome);
// The outcome's "type" on the wire.
std::string_view to_wire(Outcome::Kind kind);
// A refused_before_start outcome with this reason.
Outcome refused(RefusalReason reason);
Expected<Outcome> parse_outcome(simdjson::dom::element element);

// Transient refusals carry retry_after_ms; a client may try again later.
bool is_transient_refusal(std::string_view reason);

struct AcceptedRecord {
  std::string job_id;
  int64_t queue_position = 0;
  std::vector<std::string> env_not_forwarded;
  Platform platform = Platform::kLinux;
  Network network = Network::kOffline;
  std::optional<std::string> secret;  // direct jobs only, only on the submitting connection
};
std::string encode_accepted(const AcceptedRecord& r);

std::string encode_started(int64_t seq, int64_t queue_wait_ms, int64_t started_at_ms);
std::string encode_output(int64_t seq, std::string_view stream, std::string_view bytes,
                          std::optional<int64_t> truncated_before_seq = std::nullopt);

// The workspace fields of a terminal record, each one encoded JSON value (src/workspace fills
// them after the job; absent = the report could not be computed: workspace_changes is null and
// the three reports are omitted, "not reported").
struct WorkspaceReportJson {
  std::string changes, untracked_files, ignored_writes, git_state_changed;
  bool changes_truncated = false;  // (ext) workspace_changes_truncated
};

struct TerminalRecord {
  std::string job_id;
  int64_t seq = 0;  // (ext) terminal is the job's last record
  Outcome outcome;
  std::optional<KillReason> killed;     // omitted when absent
  std::optional<std::vector<int>> pipestatus;  // a shell pipeline's statuses; omitted when absent
  int64_t wall_ms = 0;
  int64_t queue_wait_ms = 0;
  int64_t bundle_bytes = 0;
  std::optional<Ran> ran;             // null only for expired history
  std::optional<std::string> refusal_detail;  // omitted when absent
  std::optional<int64_t> retry_after_ms;      // omitted when absent
  bool oom_killed = false;            // (ext)
  // (ext) "resource_usage": the job cgroup's CPU time and peak memory, where the kernel said
  std::optional<int64_t> cpu_user_us, cpu_system_us, memory_peak_bytes;
  std::string cpus;                   // (ext) the cpuset the job ran on ("" if it never ran)
  bool cpus_shared = false;           // (ext) its cores were shared (an oversubscribed host)
  Platform platform = Platform::kLinux;
  Network network = Network::kOffline;
  std::optional<std::string> tree_hash;          // the prepared tree the job ran against
  std::optional<WorkspaceReportJson> workspace;  // what the job changed
};
std::string encode_terminal(const TerminalRecord& r);

// ---- client side ----
// One frame from the runner: a reply (result or error) or a stream record.
struct Message {
  std::optional<int64_t> id;
  enum class Kind { kResult, kError, kRecord } kind = Kind::kRecord;
  std::string error_code, error_message;  // kError: as sent
  ErrorCode error = ErrorCode::kOther;     // kError: error_code parsed (kOther: one we do not know)
  std::string type;                        // kRecord: accepted, started, output, terminal, ...
  int64_t seq = 0;
  std::string job_id;
  std::string stream;                      // output
  std::string bytes;                       // output, decoded
  Outcome outcome;                         // terminal
  std::optional<std::string> killed;       // terminal
  std::optional<std::string> refusal_detail;
  std::optional<int64_t> retry_after_ms;   // terminal: a refusal's retry hint, only when sent
  std::string outcome_type;                // terminal: the outcome's "type" as sent (names one we do not know)
  std::string raw;                         // the frame as received
};
Expected<Message> parse_message(simdjson::dom::parser& parser, std::string_view payload);

}  // namespace motor::protocol
