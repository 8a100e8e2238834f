#include "client/stream_follow.hpp"

#include <poll.h>
#include <signal.h>
#include <simdjson.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "client/cli_common.hpp"
#include "client/exit_codes.hpp"
#include "protocol/json_writer.hpp"

namespace motor::client {
namespace {

using Kind = protocol::Message::Kind;

// An `accepted` record as --json prints it when the secret went to --secret-file: every field
// but the secret, which then appears nowhere but that file.
std::string without_secret(std::string_view raw) {
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(raw.data(), raw.size()).get_object().get(obj)) return "{}";
  protocol::JsonWriter w;
  w.begin_object();
  for (auto [key, value] : obj) {
    if (key != "secret") w.field_raw(key, simdjson::minify(value));
  }
  w.end_object();
  return w.take();
}

std::string secret_of(std::string_view raw) {
  simdjson::dom::parser parser;
  std::string_view value;
  if (parser.parse(raw.data(), raw.size())["secret"].get_string().get(value)) return "";
  return std::string(value);
}

// Sleeps `ms`; false if Ctrl-C came first (SIGINT is unblocked only while waiting, see run_cli).
bool backoff_wait(int ms) {
  sigset_t during_wait;
  sigprocmask(SIG_SETMASK, nullptr, &during_wait);
  sigdelset(&during_wait, SIGINT);
  const timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  return !(ppoll(nullptr, 0, &ts, &during_wait) < 0 && errno == EINTR && interrupted());
}

class StreamFollower {
 public:
  StreamFollower(const CliOptions& o, Connection& conn, FollowStart start) : o_(o), conn_(conn), s_(std::move(start)) {}

  int run() {
    for (;;) {
      auto m = conn_.read(&interrupted);
      std::optional<int> done;
      if (!m && m.error().code == kInterrupted) done = on_interrupt();
      else if (!m) done = on_lost(m.error());
      else done = on_message(*m);
      if (done) return *done;
    }
  }

 private:
  void cancel() {
    (void)conn_.request("exec.cancel", job_ref_params(s_.job_id, std::nullopt, std::nullopt));
    cancel_sent_ = true;
  }

  std::optional<int> on_interrupt() {
    if (g_interrupts > 1) return kExitCancelled;
    if (s_.job_id.empty()) {
      cancel_wanted_ = true;  // Ctrl-C before the job had an id: cancel once it has one
    } else if (!cancel_sent_) {
      fmt::print(stderr, "motor: cancelling job {} (Ctrl-C again to stop waiting)\n", s_.job_id);
      cancel();
    }
    return std::nullopt;
  }

  // The connection broke: resume where we were; the runner keeps the job's history.
  std::optional<int> on_lost(const Error& e) {
    if (e.code != "unreachable" || s_.job_id.empty()) {
      print_error(e);
      return exit_code_for_error(e.code);
    }
    Error why = e;
    if (resume(why)) return std::nullopt;
    print_error(why);
    fmt::print(stderr, "motor: job {} is still the runner's; follow it later with: motor {} attach {} --from-seq {}\n",
               s_.job_id, endpoint_of(o_).as_option(), s_.job_id, s_.last_seq + 1);
    const int code = exit_code_for_error(why.code);
    return code == kExitSoftware ? kExitTransient : code;
  }

  // Reconnects with backoff (0.2 s doubling up to 5 s; about three minutes in all) and attaches
  // from last_seq + 1, so nothing is run twice and nothing is missed. False, with `why`, when the
  // runner stayed out of reach, refused us for good, or the caller gave up (Ctrl-C).
  bool resume(Error& why) {
    constexpr int kAttempts = 40;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      if (!backoff_wait(std::min(200 << std::min(attempt, 5), 5000))) {
        why = Error{std::string(kInterrupted), "stopped reconnecting (Ctrl-C); the job was not cancelled"};
        return false;
      }
      auto again = connect_to(o_);
      if (!again) {
        why = again.error();
        if (exit_code_for_error(why.code) != kExitTransient) return false;
        continue;
      }
      conn_ = std::move(*again);
      if (!o_.json) (void)ask_binary_output(conn_);
      auto id = conn_.request("exec.attach", job_ref_params(s_.job_id, s_.secret, s_.last_seq + 1));
      if (!id) {
        why = id.error();
        continue;
      }
      s_.request_id = *id;
      return true;
    }
    return false;
  }

  std::optional<int> on_message(const protocol::Message& m) {
    if (o_.json && s_.secret_fd >= 0 && m.type == "accepted") {
      write_out(STDOUT_FILENO, without_secret(m.raw) + "\n");
    } else if (o_.json) {
      print_json_line(m);
    }
    if (m.id && *m.id != s_.request_id) return std::nullopt;  // a reply to our cancel
    if (m.kind == Kind::kError && m.error == protocol::ErrorCode::kStalled && !s_.job_id.empty()) {
      // The runner stopped feeding us because we read too slowly; nothing is lost: pick up
      // where we are.
      if (auto id = conn_.request("exec.attach", job_ref_params(s_.job_id, s_.secret, s_.last_seq + 1))) s_.request_id = *id;
      return std::nullopt;
    }
    if (m.kind == Kind::kError) {
      fmt::print(stderr, "motor: {}: {}\n", m.error_code, m.error_message);
      return exit_code_for_error(m.error_code);
    }
    if (m.kind != Kind::kRecord) return std::nullopt;
    // Every sequenced record counts toward the resume cursor, one of a type we do not know too.
    if (m.seq > 0) s_.last_seq = std::max(s_.last_seq, m.seq);
    if (m.type == "accepted") {
      on_accepted(m);
    } else if (m.type == "output" && !o_.json) {
      write_out(output_fd_for(m.stream), m.bytes);
    } else if (m.type == "terminal") {
      if (!o_.json) write_out(STDERR_FILENO, describe_terminal(m));
      return exit_code_for(m.outcome, m.killed, m.retry_after_ms);
    }
    return std::nullopt;  // a record type we do not know: skipped, never terminal
  }

  void on_accepted(const protocol::Message& m) {
    s_.job_id = m.job_id;
    if (std::string value = secret_of(m.raw); !value.empty()) {
      if (s_.secret_fd >= 0) {
        std::string line = value + "\n";
        write_out(s_.secret_fd, line);
        ::close(s_.secret_fd);
        s_.secret_fd = -1;
        explicit_bzero(line.data(), line.size());
      } else if (!o_.json) {
        fmt::print(stderr, "motor: direct job {}; its secret (shown once, keep it private): {}\n", s_.job_id, value);
      }
      explicit_bzero(value.data(), value.size());
    }
    if (cancel_wanted_ && !cancel_sent_) cancel();
  }

  const CliOptions& o_;
  Connection& conn_;
  FollowStart s_;
  bool cancel_sent_ = false;
  bool cancel_wanted_ = false;
};

}  // namespace

Status ask_binary_output(Connection& conn) {
  return conn.send_raw(R"({"id":0,"method":"runner.hello","params":{"binary_output":true}})");
}

int follow_stream(const CliOptions& o, Connection& conn, FollowStart start) {
  return StreamFollower(o, conn, std::move(start)).run();
}

std::string describe_terminal(const protocol::Message& m) {
  using OK = protocol::Outcome::Kind;
  const auto kill = m.killed ? protocol::parse_kill_reason(*m.killed) : std::nullopt;
  if (m.outcome.kind == OK::kRefusedBeforeStart) {
    const std::string reason = m.outcome.reason.empty() ? "(no reason given)" : m.outcome.reason;
    std::string s = "motor: the runner refused the job: " + reason;
    if (m.refusal_detail) s += " (" + *m.refusal_detail + ")";
    if (m.retry_after_ms) s += fmt::format("; try again later (in {} ms)", *m.retry_after_ms);
    return s + "\n";
  }
  if (kill == protocol::KillReason::kDeadline) return fmt::format("motor: job {} was killed at its deadline\n", m.job_id);
  if (m.killed && !kill) {
    return fmt::format("motor: job {} was killed for a reason this client does not know ({})\n", m.job_id, *m.killed);
  }
  if (m.outcome.kind == OK::kOutcomeUnknown && m.outcome_type != "outcome_unknown") {
    return fmt::format("motor: job {} ended with an outcome this client does not know ({}); it may have run\n", m.job_id,
                       m.outcome_type);
  }
  if (m.outcome.kind == OK::kOutcomeUnknown) {
    return fmt::format("motor: job {} ended while the runner was down; its outcome is unknown\n", m.job_id);
  }
  if (m.outcome.kind == OK::kHistoryExpired) return fmt::format("motor: job {}: its history has expired\n", m.job_id);
  return "";
}

int output_fd_for(std::string_view stream) { return stream == "stdout" ? STDOUT_FILENO : STDERR_FILENO; }

}  // namespace motor::client
