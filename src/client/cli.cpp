// `motor`'s commands: each sends its requests to the runner and prints the answer.
#include "client/cli.hpp"

#include <fcntl.h>
#include <signal.h>
#include <simdjson.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "client/cache_command.hpp"
#include "client/cli_common.hpp"
#include "client/exec_remote.hpp"
#include "client/exit_codes.hpp"
#include "client/fill_tip.hpp"
#include "client/screen_command.hpp"
#include "client/stream_follow.hpp"
#include "client/workspace_sync.hpp"
#include "motor/printable.hpp"
#include "protocol/json_writer.hpp"
#include "screen/rules.hpp"

namespace motor::client {
namespace {

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

std::string run_params(const CliOptions& o) {
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", o.workspace_key).field("cwd", o.cwd);
  if (!o.repository_root.empty()) w.field("repository_root", o.repository_root);
  if (!o.fill_tip_commit.empty()) {
    w.key("fill_tip").begin_object().field("branch", o.fill_tip_branch).field("commit", o.fill_tip_commit).end_object();
  }
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

PrepareRequest prepare_request(const CliOptions& o, const std::string& key) {
  PrepareRequest r;
  r.key = key;
  r.progress = isatty(STDOUT_FILENO) && !o.json;
  r.untrusted_base = untrusted_base(o);
  return r;
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
  auto prepared = prepare_workspace(
      conn, *checkout, prepare_request(o, out.workspace_key));
  if (!prepared || !prepared->prepared) return Error{std::string(kExitCarrier), std::to_string(report_prepare_failure(prepared))};
  out.repository_root = checkout->root;
  if (out.cwd.empty()) out.cwd = checkout->rel_cwd;
  // A fill tip only for a trusted run whose workspace now holds exactly the tip's tree (the runner
  // builds it from there); an unverified one costs the run nothing (docs/compile-cache.md). Not
  // when nothing changed since the last sync: that one reported it, and this run starts no git.
  // The local half first: a workspace that is not the local default tip's tree (an edited
  // checkout, another branch: most runs) asks the origin nothing.
  if (!o.untrusted && !prepared->unchanged) {
    auto local = local_tip(checkout->root);
    if (local && commit_tree(checkout->root, local->commit) == prepared->tree_hash) {
      if (auto tip = FillTipVerifier(fill_tip_store_dir()).verify(*local)) {
        out.fill_tip_branch = tip->branch;
        out.fill_tip_commit = tip->commit;
      }
    }
  }
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
  auto prepared = prepare_workspace(
      conn, *checkout, prepare_request(o, key));
  if (!prepared || !prepared->prepared) return report_prepare_failure(prepared);
  if (o.json) {
    write_out(STDOUT_FILENO, prepared->raw);
    write_out(STDOUT_FILENO, "\n");
  } else {
    fmt::print("workspace {} prepared: tree {}, {} bundle bytes sent (runner: fetch {} ms, checkout {} ms)\n", key,
               prepared->tree_hash, prepared->bundle_bytes, prepared->fetch_ms, prepared->checkout_ms);
  }
  return 0;
}

// run and attach: the job's stream, followed to its terminal record.
int run_or_attach(const CliOptions& o, Connection& conn) {
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
  FollowStart start;
  start.job_id = run ? "" : o.job_id;
  start.last_seq = run ? 0 : o.from_seq - 1;
  if (run && o.secret_file) {
    auto fd = create_secret_file(*o.secret_file);
    if (!fd) {
      fmt::print(stderr, "motor: {}\n", fd.error().message);
      return kExitUsage;
    }
    start.secret_fd = *fd;
  }
  if (!run && (o.secret_file || o.secret_stdin)) {
    auto s = read_secret(o);
    if (!s) {
      fmt::print(stderr, "motor: {}\n", s.error().message);
      return kExitUsage;
    }
    start.secret = std::move(*s);
  }
  CliOptions effective = o;
  if (run && !o.no_sync) {
    auto synced = sync_checkout(o, conn);
    if (!synced) return synced.error().code == kExitCarrier ? std::atoi(synced.error().message.c_str()) : kExitSoftware;
    effective = std::move(*synced);
  }
  // Output goes to our stdout as raw bytes: ask for it raw (--json prints the records as sent).
  if (!o.json) (void)ask_binary_output(conn);
  auto id = run ? conn.request("exec.run", run_params(effective))
                : conn.request("exec.attach", job_ref_params(o.job_id, start.secret, o.from_seq));
  if (!id) {
    print_error(id.error());
    return exit_code_for_error(id.error().code);
  }
  start.request_id = *id;
  return follow_stream(o, conn, std::move(start));
}

}  // namespace

int run_cli(const CliOptions& o) {
  if (o.command == "screen" && o.screen_rules) {
    fmt::print("{}", screen::rules_markdown());
    return 0;
  }
  if (o.command == "screen") {
    return run_screen(ScreenRequest{.range = o.screen_range, .diff_file = o.screen_diff, .from_stdin = o.screen_stdin, .json = o.json});
  }
  if (o.command == "exec-remote") return run_exec_remote(o);
  auto conn = connect_to(o);
  if (!conn) {
    print_error(conn.error());
    return exit_code_for_error(conn.error().code);
  }
  if (o.command == "run" || o.command == "attach") return run_or_attach(o, *conn);
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
  if (o.command == "cache" && o.cache_action == "status") return simple_request(o, *conn, "cache.status", "{}", print_cache_status);
  if (o.command == "cache") return simple_request(o, *conn, "cache.clear", cache_clear_params(o.cache_repository), print_cache_cleared);
  const std::string job = o.job_id.empty() ? "{}" : job_ref_params(o.job_id, secret, std::nullopt);
  if (o.command == "status" && o.metrics) return simple_request(o, *conn, "runner.status", R"({"metrics":true})", print_metrics);
  if (o.command == "status" && o.job_id.empty()) return simple_request(o, *conn, "runner.status", "{}", print_result);
  if (o.command == "status") return simple_request(o, *conn, "exec.status", job, print_result);
  if (o.command == "drain") return simple_request(o, *conn, "runner.drain", o.wait ? R"({"wait":true})" : "{}", print_result);
  if (o.command == "resume") return simple_request(o, *conn, "runner.resume", "{}", print_result);
  if (o.command == "cancel") return simple_request(o, *conn, "exec.cancel", job, print_result);
  return simple_request(o, *conn, "exec.list", "{}", print_list);
}

}  // namespace motor::client
