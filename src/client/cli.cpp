#include "client/cli.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "client/connection.hpp"
#include "motor/fd_io.hpp"
#include "motor/printable.hpp"
#include "client/exit_codes.hpp"
#include "client/screen_command.hpp"
#include "screen/rules.hpp"
#include "client/workspace_sync.hpp"
#include "protocol/json_writer.hpp"
#include "protocol/size.hpp"

namespace motor::client {
namespace {

Error usage(std::string message) { return Error{"usage", std::move(message)}; }

std::optional<int64_t> parse_positive(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

volatile sig_atomic_t g_interrupts = 0;
bool interrupted() { return g_interrupts > 0; }  // SIGINT arrives only inside ppoll

bool write_all(int fd, std::string_view data) { return motor::write_all(fd, data.data(), data.size()); }

void print_json_line(const protocol::Message& m) {
  write_all(STDOUT_FILENO, m.raw);
  write_all(STDOUT_FILENO, "\n");
}

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

// The codes a runner refuses a whole connection with (an error without a request id).
bool is_connection_refusal(std::string_view code) {
  return code == "unauthorized" || code == "runner_full" || code == "runner_draining";
}

void print_error(const Error& e) {
  if (is_connection_refusal(e.code)) {
    fmt::print(stderr, "motor: the runner refused this connection ({}): {}\n", e.code, e.message);
  } else {
    fmt::print(stderr, "motor: {}\n", e.message);
  }
}

std::string describe_refusal(const protocol::Message& m) {
  std::string s = "motor: the runner refused the job: " + m.outcome.reason;
  if (m.refusal_detail) s += " (" + *m.refusal_detail + ")";
  if (protocol::is_transient_refusal(m.outcome.reason)) s += "; try again later";
  return s + "\n";
}

// Creates the secret file before the job is submitted: new, 0600, never through a symlink,
// never over an existing file.
Expected<int> create_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return Error{"usage", fmt::format("cannot create the secret file {}: {}{}", path, std::strerror(err),
                                      err == EEXIST ? " (it is never overwritten; pick a new path)" : "")};
  }
  fchmod(fd, 0600);  // whatever the umask says
  return fd;
}

// Reads a secret from a file or stdin: one line, surrounding whitespace dropped.
Expected<std::string> read_secret(const CliOptions& o) {
  std::string text;
  int fd = STDIN_FILENO;
  if (o.secret_file) {
    fd = ::open(o.secret_file->c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Error{"usage", fmt::format("cannot read the secret file {}: {}", *o.secret_file, std::strerror(errno))};
  }
  char buf[512];
  for (ssize_t n; text.size() < 4096 && (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  if (fd != STDIN_FILENO) ::close(fd);
  explicit_bzero(buf, sizeof buf);
  const auto begin = text.find_first_not_of(" \t\r\n");
  const auto end = text.find_last_not_of(" \t\r\n");
  std::string secret = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
  explicit_bzero(text.data(), text.size());
  if (secret.empty() || secret.find('\n') != std::string::npos) return Error{"usage", "the secret must be one non-empty line"};
  return secret;
}

std::string job_ref_params(const CliOptions& o, const std::optional<std::string>& secret, std::optional<int64_t> from_seq) {
  protocol::JsonWriter w;
  w.begin_object().field("job_id", o.job_id);
  if (from_seq) w.field("from_seq", *from_seq);
  if (secret) w.field("secret", *secret);
  w.end_object();
  return w.take();
}

Endpoint endpoint_of(const CliOptions& o) { return Endpoint{o.socket_path, o.host}; }

Expected<Connection> connect_to(const CliOptions& o) { return Connection::open(endpoint_of(o), std::getenv("MOTOR_SSH_COMMAND")); }

// Sleeps `ms`; false if Ctrl-C came first (SIGINT is unblocked only while waiting, see run_cli).
bool backoff_wait(int ms) {
  sigset_t during_wait;
  sigprocmask(SIG_SETMASK, nullptr, &during_wait);
  sigdelset(&during_wait, SIGINT);
  const timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  return !(ppoll(nullptr, 0, &ts, &during_wait) < 0 && errno == EINTR && interrupted());
}

// The connection broke while following `job_id`: reconnects with backoff (0.2 s doubling up to
// 5 s; about three minutes in all) and attaches from `last_seq` + 1, so nothing is run twice and
// nothing is missed. False, with `why`, when the runner stayed out of reach, refused us for good,
// or the caller gave up (Ctrl-C).
bool resume_follow(const CliOptions& o, Connection& conn, int64_t& request_id, const std::string& job_id, int64_t last_seq,
                   const std::optional<std::string>& secret, Error& why) {
  constexpr int kAttempts = 40;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (!backoff_wait(std::min(200 << std::min(attempt, 5), 5000))) {
      why = Error{"interrupted", "stopped reconnecting (Ctrl-C); the job was not cancelled"};
      return false;
    }
    auto again = connect_to(o);
    if (!again) {
      why = again.error();
      if (exit_code_for_error(why.code) != kExitTransient) return false;
      continue;
    }
    conn = std::move(*again);
    CliOptions again_opts = o;
    again_opts.job_id = job_id;
    auto id = conn.request("exec.attach", job_ref_params(again_opts, secret, last_seq + 1));
    if (!id) {
      why = id.error();
      continue;
    }
    request_id = *id;
    return true;
  }
  return false;
}

// Follows a job's stream (exec.run or exec.attach) to its terminal record. If the connection
// breaks, reconnects and attaches from the last seq seen + 1: a job is never run twice.
int follow_stream(const CliOptions& o, Connection& conn, int64_t request_id, std::string job_id, int64_t last_seq,
                  int secret_fd, const std::optional<std::string>& secret) {
  bool cancel_sent = false;
  bool cancel_wanted = false;  // Ctrl-C before the job had an id: cancel once it has one
  for (;;) {
    auto m = conn.read(&interrupted);
    if (!m && m.error().code == "interrupted") {
      if (g_interrupts > 1) return kExitCancelled;
      if (job_id.empty()) {
        cancel_wanted = true;
        continue;
      }
      if (!cancel_sent) {
        fmt::print(stderr, "motor: cancelling job {} (Ctrl-C again to stop waiting)\n", job_id);
        (void)conn.request("exec.cancel", fmt::format("{{\"job_id\":\"{}\"}}", job_id));
        cancel_sent = true;
      }
      continue;
    }
    if (!m) {
      if (m.error().code != "unreachable" || job_id.empty()) {
        print_error(m.error());
        return exit_code_for_error(m.error().code);
      }
      // Resume where we were; the runner keeps the job's history.
      Error why = m.error();
      if (!resume_follow(o, conn, request_id, job_id, last_seq, secret, why)) {
        print_error(why);
        fmt::print(stderr, "motor: job {} is still the runner's; follow it later with: motor {} attach {} --from-seq {}\n",
                   job_id, endpoint_of(o).as_option(), job_id, last_seq + 1);
        const int code = exit_code_for_error(why.code);
        return code == kExitSoftware ? kExitTransient : code;
      }
      continue;
    }
    if (o.json && secret_fd >= 0 && m->type == "accepted") {
      write_all(STDOUT_FILENO, without_secret(m->raw) + "\n");
    } else if (o.json) {
      print_json_line(*m);
    }
    if (m->id && *m->id != request_id) continue;  // a reply to our cancel
    if (m->kind == protocol::Message::Kind::kError && m->error_code == "stalled" && !job_id.empty()) {
      // The runner stopped feeding us because we read too slowly; nothing is lost: pick up
      // where we are.
      CliOptions again_opts = o;
      again_opts.job_id = job_id;
      auto id = conn.request("exec.attach", job_ref_params(again_opts, secret, last_seq + 1));
      if (id) request_id = *id;
      continue;
    }
    if (m->kind == protocol::Message::Kind::kError) {
      fmt::print(stderr, "motor: {}: {}\n", m->error_code, m->error_message);
      return exit_code_for_error(m->error_code);
    }
    if (m->kind != protocol::Message::Kind::kRecord) continue;
    if (m->seq > 0) last_seq = std::max(last_seq, m->seq);
    if (m->type == "accepted") {
      job_id = m->job_id;
      if (auto at = m->raw.find("\"secret\":\""); at != std::string::npos) {
        const std::string value = m->raw.substr(at + 10, m->raw.find('"', at + 10) - (at + 10));
        if (secret_fd >= 0) {
          std::string line = value + "\n";
          write_all(secret_fd, line);
          ::close(secret_fd);
          secret_fd = -1;
          explicit_bzero(line.data(), line.size());
        } else if (!o.json) {
          fmt::print(stderr, "motor: direct job {}; its secret (shown once, keep it private): {}\n", job_id, value);
        }
      }
      if (cancel_wanted && !cancel_sent) {
        (void)conn.request("exec.cancel", fmt::format("{{\"job_id\":\"{}\"}}", job_id));
        cancel_sent = true;
      }
    } else if (m->type == "output" && !o.json) {
      write_all(m->stream == "stderr" ? STDERR_FILENO : STDOUT_FILENO, m->bytes);
    } else if (m->type == "terminal") {
      if (!o.json) {
        if (m->outcome.kind == protocol::Outcome::Kind::kRefusedBeforeStart) {
          write_all(STDERR_FILENO, describe_refusal(*m));
        } else if (m->killed == std::optional<std::string>("deadline")) {
          fmt::print(stderr, "motor: job {} was killed at its deadline\n", m->job_id);
        } else if (m->outcome.kind == protocol::Outcome::Kind::kOutcomeUnknown) {
          fmt::print(stderr, "motor: job {} ended while the runner was down; its outcome is unknown\n", m->job_id);
        } else if (m->outcome.kind == protocol::Outcome::Kind::kHistoryExpired) {
          fmt::print(stderr, "motor: job {}: its history has expired\n", m->job_id);
        }
      }
      return exit_code_for(m->outcome, m->killed);
    }
    // Unknown record types are skipped (their seq still counts).
  }
}

std::string run_params(const CliOptions& o) {
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", o.workspace_key).field("cwd", o.cwd);
  if (!o.repository_root.empty()) w.field("repository_root", o.repository_root);
  if (o.shell_command) {
    w.field("command", *o.shell_command);
  } else {
    w.key("argv").begin_array();
    for (const auto& a : o.argv) w.string(a);
    w.end_array();
  }
  w.key("env").begin_object();
  for (const auto& [k, v] : o.env) w.field(k, v);
  w.end_object();
  if (o.timeout_s) w.field("timeout", *o.timeout_s);
  if (o.cpus) w.field("cpus", *o.cpus);
  if (o.memory_bytes) w.field("memory", *o.memory_bytes);
  if (o.direct) w.field("direct", true);
  if (o.untrusted) w.field("untrusted", true);
  if (!o.network.empty()) w.field("network", o.network);
  if (!o.priority.empty()) w.field("priority", o.priority);
  w.end_object();
  return w.take();
}

int simple_request(const CliOptions& o, Connection& conn, std::string_view method, const std::string& params,
                   void (*print)(std::string_view raw)) {
  auto id = conn.request(method, params);
  if (!id) {
    print_error(id.error());
    return exit_code_for_error(id.error().code);
  }
  for (;;) {
    auto m = conn.read();
    if (!m) {
      print_error(m.error());
      return exit_code_for_error(m.error().code);
    }
    if (m->id != *id) continue;
    if (m->kind == protocol::Message::Kind::kError) {
      fmt::print(stderr, "motor: {}: {}\n", m->error_code, m->error_message);
      return exit_code_for_error(m->error_code);
    }
    if (o.json || !print) print_json_line(*m);
    else print(m->raw);
    return 0;
  }
}

void print_list(std::string_view raw) {
  simdjson::dom::parser parser;
  simdjson::dom::array jobs;
  if (parser.parse(raw.data(), raw.size())["result"]["jobs"].get_array().get(jobs)) return;
  fmt::print("{:<36}  {:<8}  {:<12}  {:<12}  {:<16}  {}\n", "JOB", "STATE", "CALLER", "WORKSPACE", "OUTCOME", "COMMAND");
  for (auto j : jobs) {
    auto text = [&](const char* key) {
      std::string_view v;
      return j[key].get_string().get(v) ? std::string_view("?") : v;
    };
    std::string_view type;
    std::string outcome = "-";
    if (!j["outcome"]["type"].get_string().get(type)) {
      outcome = std::string(type);
      int64_t n = 0;
      if (!j["outcome"]["code"].get_int64().get(n)) outcome += fmt::format(" {}", n);
      if (!j["outcome"]["signal"].get_int64().get(n)) outcome += fmt::format(" {}", n);
    }
    // Every field is the runner's or a caller's text: escaped, so no caller writes escape sequences
    // into the operator's terminal.
    fmt::print("{:<36}  {:<8}  {:<12}  {:<12}  {:<16}  {}\n", escape_control_chars(text("job_id")),
               escape_control_chars(text("state")), escape_control_chars(text("caller")),
               escape_control_chars(text("workspace_key")), outcome, escape_control_chars(text("summary")));
  }
}

void print_metrics(std::string_view raw) {
  simdjson::dom::parser parser;
  std::string_view text;
  if (!parser.parse(raw.data(), raw.size())["result"]["metrics"].get_string().get(text)) fmt::print("{}", text);
}

void print_result(std::string_view raw) {
  simdjson::dom::parser parser;
  simdjson::dom::element result;
  if (parser.parse(raw.data(), raw.size())["result"].get(result)) return;
  simdjson::dom::object obj;
  if (result.get_object().get(obj)) return;
  for (auto [key, value] : obj) fmt::print("{}: {}\n", key, simdjson::minify(value));
}

// Prints a prepare's refusal or local error; returns the exit status for it.
int report_prepare_failure(const Expected<PrepareOutcome>& r) {
  if (!r && is_connection_refusal(r.error().code)) {
    print_error(r.error());
    return exit_code_for_error(r.error().code);
  }
  if (!r) {
    fmt::print(stderr, "motor: preparing the workspace: {}{}\n", r.error().message,
               r.error().code == "transfer_interrupted" ? " (transfer_interrupted: the workspace is as it was)" : "");
    return r.error().code == "transfer_interrupted" ? kExitTransient : kExitUnavailable;
  }
  std::string s = "motor: the runner refused to prepare the workspace: " + r->reason;
  if (!r->detail.empty()) s += " (" + r->detail + ")";
  fmt::print(stderr, "{}{}\n", s, r->transient ? "; try again later" : "");
  return r->transient ? kExitTransient : kExitUnavailable;
}

std::optional<std::string> untrusted_base(const CliOptions& o) {
  if (!o.untrusted) return std::nullopt;
  return o.base.empty() ? std::string("HEAD") : o.base;
}

// run inside a Git checkout: prepare its workspace, then run in the same relative directory.
// Not in a checkout: the options as they are. A failure carries the exit status ("exit").
Expected<CliOptions> sync_checkout(const CliOptions& o, Connection& conn) {
  char here[4096];
  if (!getcwd(here, sizeof here)) return o;
  auto checkout = find_checkout(here);
  if (!checkout) return o;  // not a checkout: run in the workspace as it is
  CliOptions out = o;
  if (!o.workspace_key_given) out.workspace_key = derive_workspace_key(checkout->root);
  auto prepared = prepare_workspace(conn, *checkout, out.workspace_key, isatty(STDOUT_FILENO) && !o.json, untrusted_base(o));
  if (!prepared || !prepared->prepared) return Error{"exit", std::to_string(report_prepare_failure(prepared))};
  out.repository_root = checkout->root;
  if (out.cwd.empty()) out.cwd = checkout->rel_cwd;
  return out;
}

void print_workspaces(std::string_view raw) {
  simdjson::dom::parser parser;
  simdjson::dom::array list;
  if (parser.parse(raw.data(), raw.size())["result"]["workspaces"].get_array().get(list)) return;
  fmt::print("{:<32}  {:<12}  {}\n", "WORKSPACE", "TREE", "REPOSITORY");
  for (auto ws : list) {
    std::string_view key, tree = "-", repo = "-";
    if (ws["workspace_key"].get_string().get(key)) {}
    if (ws["tree_hash"].get_string().get(tree)) {}
    if (ws["repository_root"].get_string().get(repo)) {}
    fmt::print("{:<32}  {:<12}  {}\n", key, tree.substr(0, 12), repo);
  }
}

int run_workspace(const CliOptions& o, Connection& conn) {
  if (o.workspace_action == "list") return simple_request(o, conn, "workspace.list", "{}", print_workspaces);
  if (o.workspace_action == "drop") {
    protocol::JsonWriter w;
    w.begin_object().field("workspace_key", o.workspace_key).end_object();
    return simple_request(o, conn, "workspace.drop", w.str(), print_result);
  }
  char here[4096];
  auto checkout = find_checkout(getcwd(here, sizeof here) ? here : ".");
  if (!checkout) {
    fmt::print(stderr, "motor: {}\n", checkout.error().message);
    return kExitUsage;
  }
  const std::string key = o.workspace_key_given ? o.workspace_key : derive_workspace_key(checkout->root);
  auto prepared = prepare_workspace(conn, *checkout, key, isatty(STDOUT_FILENO) && !o.json, untrusted_base(o));
  if (!prepared || !prepared->prepared) return report_prepare_failure(prepared);
  if (o.json) {
    write_all(STDOUT_FILENO, prepared->raw);
    write_all(STDOUT_FILENO, "\n");
  } else {
    fmt::print("workspace {} prepared: tree {}, {} bundle bytes sent (runner: fetch {} ms, checkout {} ms)\n", key,
               prepared->tree_hash, prepared->bundle_bytes, prepared->fetch_ms, prepared->checkout_ms);
  }
  return 0;
}

}  // namespace

const char* usage_text() {
  return R"(usage: motor [--socket PATH | --host ssh://[user@]host[:port]] COMMAND ...

  motor run [-w KEY] [--cwd DIR] [--timeout S] [--cpus N] [--memory SIZE] [--priority interactive|batch]
            [--network offline|outbound] [--env NAME=VALUE]... [--json] (-- CMD [ARGS...] | -c 'SHELL COMMAND')
  motor run --direct [--secret-file PATH] ...   (a direct job: see docs/direct-runs.md)
  motor attach JOB [--from-seq N] [--json] [--secret-file PATH | --secret-stdin]
  motor status [JOB] [--json] [--secret-file PATH | --secret-stdin]
  motor cancel JOB [--secret-file PATH | --secret-stdin]
  motor list [--json]
  motor status --metrics                  (the runner's Prometheus metrics)
  motor drain [--wait] | motor resume     (stop taking new jobs / take them again)
  motor workspace prepare [-w KEY]        (send this Git checkout's state to its workspace)
  motor workspace drop KEY | motor workspace list
  motor run --untrusted [--base REV] ... | motor workspace prepare --untrusted [--base REV]
                                          (the runner screens the change from REV, default HEAD,
                                           and runs nothing unless it MAY EXECUTE)
  motor screen (BASE..HEAD | --diff FILE | --stdin) [--json] | motor screen --rules
                                          (may this change be executed at all? exit 0 MAY EXECUTE,
                                           1 DO NOT EXECUTE, 2 error = DO NOT EXECUTE;
                                           docs/change-screen.md)

Inside a Git checkout, `run` first prepares the checkout's workspace (key -w KEY, else derived
from the checkout's path), then runs in the same directory relative to its root; --no-sync
skips that. A transfer shows its progress when stdout is a terminal.

The socket is --socket, else $MOTOR_SOCKET, else /run/motor/motor.sock. --host (or $MOTOR_HOST)
reaches a runner on another host through OpenSSH and a reused control master; $MOTOR_SSH_COMMAND
replaces `ssh` and its options (docs/remote-callers.md). Options may come before or after other
arguments. SIZE takes K, M or G (powers of 1024).

`run` streams the job's stdout and stderr and exits with the job's status: its exit code; 128+N
for signal N; 124 if killed at its deadline; 130 if cancelled (Ctrl-C cancels the job); 75 if
the runner refused for now (try again later); 69 for a lasting refusal; 64 for usage errors.

A direct job's secret is printed once on stderr, or written to a new 0600 file with
--secret-file. A secret is read only from a file or stdin, never from the command line.
)";
}

Expected<CliOptions> parse_cli(const std::vector<std::string>& args, const char* env_socket, const char* env_host) {
  CliOptions o;
  o.socket_path = env_socket && *env_socket ? env_socket : kDefaultSocket;
  bool socket_given = false;
  if (env_host && *env_host) {
    auto host = parse_ssh_url(env_host);
    if (!host) return usage("MOTOR_HOST=" + host.error().message);
    o.host = std::move(*host);
  }
  std::vector<std::string> positional;
  bool rest_is_command = false, host_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (rest_is_command) {
      o.argv.push_back(a);
      continue;
    }
    if (a == "--") {
      rest_is_command = true;
      continue;
    }
    std::string name = a, inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
    }
    auto value = [&]() -> Expected<std::string> {
      if (has_inline) return inline_value;
      if (i + 1 >= args.size()) return usage(name + " needs a value");
      return args[++i];
    };
    if (name == "--secret" || name == "-s" || name.rfind("--secret=", 0) == 0) {
      // Never from argv (it would show in ps and shell history), and never echoed back.
      return usage("a secret is never taken from the command line; use --secret-file PATH or --secret-stdin");
    }
    if (name == "--json") {
      o.json = true;
    } else if (name == "--direct") {
      o.direct = true;
    } else if (name == "--wait") {
      o.wait = true;
    } else if (name == "--metrics") {
      o.metrics = true;
    } else if (name == "--priority") {
      auto v = value();
      if (!v) return v.error();
      if (*v != "interactive" && *v != "batch") return usage("--priority is interactive or batch");
      o.priority = *v;
    } else if (name == "--untrusted") {
      o.untrusted = true;
    } else if (name == "--base") {
      auto v = value();
      if (!v) return v.error();
      if (v->empty() || (*v)[0] == '-') return usage("--base needs a revision, such as origin/main");
      o.base = *v;
    } else if (name == "--diff") {
      auto v = value();
      if (!v) return v.error();
      o.screen_diff = *v;
    } else if (name == "--stdin") {
      o.screen_stdin = true;
    } else if (name == "--rules") {
      o.screen_rules = true;
    } else if (name == "--secret-stdin") {
      o.secret_stdin = true;
    } else if (name == "--secret-file") {
      auto v = value();
      if (!v) return v.error();
      o.secret_file = *v;
    } else if (name == "--socket") {
      auto v = value();
      if (!v) return v.error();
      o.socket_path = *v;
      socket_given = true;
    } else if (name == "--host") {
      auto v = value();
      if (!v) return v.error();
      auto host = parse_ssh_url(*v);
      if (!host) return usage("--host " + host.error().message);
      o.host = std::move(*host);
      host_given = true;
    } else if (name == "-w" || name == "--workspace") {
      auto v = value();
      if (!v) return v.error();
      o.workspace_key = *v;
      o.workspace_key_given = true;
    } else if (name == "--no-sync") {
      o.no_sync = true;
    } else if (name == "--cwd") {
      auto v = value();
      if (!v) return v.error();
      o.cwd = *v;
    } else if (name == "--timeout" || name == "--cpus" || name == "--from-seq") {
      auto v = value();
      if (!v) return v.error();
      auto n = parse_positive(*v);
      if (!n) return usage(fmt::format("{} needs a positive whole number, got \"{}\"", name, *v));
      if (name == "--timeout") o.timeout_s = n;
      else if (name == "--cpus") o.cpus = n;
      else o.from_seq = *n;
    } else if (name == "--network") {
      auto v = value();
      if (!v) return v.error();
      if (*v != "offline" && *v != "outbound") return usage(fmt::format("--network: expected offline or outbound, got \"{}\"", *v));
      o.network = *v;
    } else if (name == "--memory") {
      auto v = value();
      if (!v) return v.error();
      auto bytes = protocol::parse_size(*v);
      if (!bytes || *bytes <= 0) return usage(fmt::format("--memory: expected a size such as 512M or 2G, got \"{}\"", *v));
      o.memory = *v;
      o.memory_bytes = *bytes;
    } else if (name == "--env" || name == "-e") {
      auto v = value();
      if (!v) return v.error();
      const auto eq = v->find('=');
      if (eq == std::string::npos || eq == 0) return usage(fmt::format("--env needs NAME=VALUE, got \"{}\"", v->substr(0, v->find('='))));
      o.env.emplace_back(v->substr(0, eq), v->substr(eq + 1));
    } else if (name == "-c") {
      auto v = value();
      if (!v) return v.error();
      o.shell_command = *v;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option " + name);
    } else {
      positional.push_back(a);
    }
  }
  if (socket_given && host_given) return usage("give either --host or --socket, not both");
  if (socket_given) o.host.reset();  // an explicit socket wins over $MOTOR_HOST
  if (positional.empty()) return usage("no command given (run, attach, status, cancel or list)");
  o.command = positional[0];
  const size_t extra = positional.size() - 1;
  if (o.command == "run") {
    if (extra > 0) return usage("run takes the command after -- (or -c 'SHELL COMMAND'), got \"" + positional[1] + "\"");
    if (o.shell_command && !o.argv.empty()) return usage("give either -c 'SHELL COMMAND' or -- CMD ARGS, not both");
    if (!o.shell_command && o.argv.empty()) return usage("run needs a command: -- CMD [ARGS...] or -c 'SHELL COMMAND'");
  } else if (o.command == "attach" || o.command == "cancel") {
    if (extra != 1) return usage(o.command + " needs exactly one job id");
    o.job_id = positional[1];
  } else if (o.command == "status") {
    if (extra > 1) return usage("status takes at most one job id");
    if (extra == 1) o.job_id = positional[1];
  } else if (o.command == "workspace") {
    if (extra < 1) return usage("workspace needs prepare, drop or list");
    o.workspace_action = positional[1];
    if (o.workspace_action == "drop" && extra == 2 && !o.workspace_key_given) {
      o.workspace_key = positional[2];
      o.workspace_key_given = true;
    } else if (extra > 1) {
      return usage("workspace " + o.workspace_action + " takes no more arguments (the key is -w KEY)");
    }
    if (o.workspace_action != "prepare" && o.workspace_action != "drop" && o.workspace_action != "list") {
      return usage("unknown workspace action \"" + o.workspace_action + "\" (prepare, drop or list)");
    }
    if (o.workspace_action == "drop" && !o.workspace_key_given) return usage("workspace drop needs a key: drop KEY or -w KEY");
  } else if (o.command == "screen") {
    if (extra > 1) return usage("screen takes one BASE..HEAD, --diff FILE or --stdin");
    if (extra == 1) o.screen_range = positional[1];
    if ((extra == 1) + o.screen_diff.has_value() + o.screen_stdin + o.screen_rules != 1) {
      return usage("screen needs exactly one of BASE..HEAD, --diff FILE or --stdin");
    }
  } else if (o.command == "list" || o.command == "drain" || o.command == "resume") {
    if (extra > 0) return usage(o.command + " takes no arguments");
  } else {
    return usage("unknown command \"" + o.command + "\" (run, attach, status, cancel, list, drain, resume, workspace or screen)");
  }
  if (o.wait && o.command != "drain") return usage("--wait is for drain");
  if ((o.screen_diff || o.screen_stdin || o.screen_rules) && o.command != "screen") {
    return usage("--diff, --stdin and --rules are for screen");
  }
  const bool prepares = o.command == "run" || (o.command == "workspace" && o.workspace_action == "prepare");
  if (o.untrusted && !prepares) return usage("--untrusted is for run and workspace prepare");
  if (o.untrusted && o.no_sync) return usage("--untrusted screens the checkout it syncs: it cannot go with --no-sync");
  if (!o.base.empty() && !o.untrusted) return usage("--base goes with --untrusted");
  if (o.no_sync && o.command != "run") return usage("--no-sync is for run");
  if (o.metrics && (o.command != "status" || !o.job_id.empty())) return usage("--metrics is for status without a job");
  if (!o.priority.empty() && o.command != "run") return usage("--priority is for run");
  if (o.command != "run" && (!o.argv.empty() || o.shell_command)) return usage("only run takes a command");
  if (o.direct && o.command != "run") return usage("--direct is for run");
  if (o.command == "run" && o.secret_file && !o.direct) return usage("--secret-file with run needs --direct");
  if (o.command == "run" && o.secret_stdin) return usage("--secret-stdin is for attach, status and cancel");
  if (o.secret_file && o.secret_stdin) return usage("give either --secret-file or --secret-stdin, not both");
  if (o.command == "list" && (o.secret_file || o.secret_stdin)) return usage("list takes no secret");
  return o;
}

bool is_screen_command(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") return false;
    if (!a.empty() && a[0] != '-') return a == "screen";
  }
  return false;
}

int run_cli(const CliOptions& o) {
  if (o.command == "screen" && o.screen_rules) {
    fmt::print("{}", screen::rules_markdown());
    return 0;
  }
  if (o.command == "screen") {
    return run_screen(ScreenRequest{.range = o.screen_range, .diff_file = o.screen_diff, .from_stdin = o.screen_stdin, .json = o.json});
  }
  auto conn = connect_to(o);
  if (!conn) {
    print_error(conn.error());
    return exit_code_for_error(conn.error().code);
  }
  if (o.command == "run" || o.command == "attach") {
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_interrupts = g_interrupts + 1; };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: the wait wakes up and cancels the job
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, nullptr);  // delivered only while waiting (Connection::read)
    signal(SIGPIPE, SIG_IGN);
    const bool run = o.command == "run";
    int secret_fd = -1;
    std::optional<std::string> secret;
    if (run && o.secret_file) {
      auto fd = create_secret_file(*o.secret_file);
      if (!fd) {
        fmt::print(stderr, "motor: {}\n", fd.error().message);
        return kExitUsage;
      }
      secret_fd = *fd;
    }
    if (!run && (o.secret_file || o.secret_stdin)) {
      auto s = read_secret(o);
      if (!s) {
        fmt::print(stderr, "motor: {}\n", s.error().message);
        return kExitUsage;
      }
      secret = std::move(*s);
    }
    CliOptions effective = o;
    if (run && !o.no_sync) {
      auto synced = sync_checkout(o, *conn);
      if (!synced) return synced.error().code == "exit" ? std::atoi(synced.error().message.c_str()) : kExitSoftware;
      effective = std::move(*synced);
    }
    auto id = run ? conn->request("exec.run", run_params(effective)) : conn->request("exec.attach", job_ref_params(o, secret, o.from_seq));
    if (!id) {
      print_error(id.error());
      return exit_code_for_error(id.error().code);
    }
    return follow_stream(o, *conn, *id, run ? "" : o.job_id, run ? 0 : o.from_seq - 1, secret_fd, secret);
  }
  std::optional<std::string> secret;
  if (o.secret_file || o.secret_stdin) {
    auto s = read_secret(o);
    if (!s) {
      fmt::print(stderr, "motor: {}\n", s.error().message);
      return kExitUsage;
    }
    secret = std::move(*s);
  }
  if (o.command == "workspace") return run_workspace(o, *conn);
  const std::string job = o.job_id.empty() ? "{}" : job_ref_params(o, secret, std::nullopt);
  if (o.command == "status" && o.metrics) return simple_request(o, *conn, "runner.status", R"({"metrics":true})", print_metrics);
  if (o.command == "status" && o.job_id.empty()) return simple_request(o, *conn, "runner.status", "{}", print_result);
  if (o.command == "status") return simple_request(o, *conn, "exec.status", job, print_result);
  if (o.command == "drain") return simple_request(o, *conn, "runner.drain", o.wait ? R"({"wait":true})" : "{}", print_result);
  if (o.command == "resume") return simple_request(o, *conn, "runner.resume", "{}", print_result);
  if (o.command == "cancel") return simple_request(o, *conn, "exec.cancel", job, print_result);
  return simple_request(o, *conn, "exec.list", "{}", print_list);
}

}  // namespace motor::client
