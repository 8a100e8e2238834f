// `motor`'s command line: options anywhere, `--opt=value`, the command after `--` or `-c`, and
// usage errors that name the problem and the fix.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "client/cli.hpp"
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

// One option being read: its name, and its value (inline, or the next argument) on demand.
struct OptionArg {
  const std::vector<std::string>& args;
  size_t& i;
  std::string name, inline_value;
  bool has_inline = false;
  Expected<std::string> value() {
    if (has_inline) return inline_value;
    if (i + 1 >= args.size()) return usage(name + " needs a value");
    return args[++i];
  }
};

struct ParseState {
  CliOptions o;
  std::vector<std::string> positional;
  bool socket_given = false, host_given = false;
};

// Switches: options without a value. False if `name` is none of them.
bool take_switch(const std::string& name, CliOptions& o) {
  bool* flag = name == "--json"           ? &o.json
               : name == "--direct"       ? &o.direct
               : name == "--wait"         ? &o.wait
               : name == "--metrics"      ? &o.metrics
               : name == "--untrusted"    ? &o.untrusted
               : name == "--stdin"        ? &o.screen_stdin
               : name == "--rules"        ? &o.screen_rules
               : name == "--secret-stdin" ? &o.secret_stdin
               : name == "--no-sync"      ? &o.no_sync
               : name == "--stdio"        ? &o.stdio
                                          : nullptr;
  if (flag) *flag = true;
  return flag != nullptr;
}

Status take_checked_value(OptionArg& a, const std::string& v, CliOptions& o) {
  const std::string& name = a.name;
  if (name == "--priority") {
    if (v != "interactive" && v != "batch") return usage("--priority is interactive or batch");
    o.priority = v;
  } else if (name == "--base") {
    if (v.empty() || v[0] == '-') return usage("--base needs a revision, such as origin/main");
    o.base = v;
  } else if (name == "--timeout" || name == "--cpus" || name == "--from-seq") {
    auto n = parse_positive(v);
    if (!n) return usage(fmt::format("{} needs a positive whole number, got \"{}\"", name, v));
    if (name == "--timeout") o.timeout_s = n;
    else if (name == "--cpus") o.cpus = n;
    else o.from_seq = *n;
  } else if (name == "--network") {
    if (v != "offline" && v != "outbound") return usage(fmt::format("--network: expected offline or outbound, got \"{}\"", v));
    o.network = v;
  } else if (name == "--memory") {
    auto bytes = protocol::parse_size(v);
    if (!bytes || *bytes <= 0) return usage(fmt::format("--memory: expected a size such as 512M or 2G, got \"{}\"", v));
    o.memory = v;
    o.memory_bytes = *bytes;
  } else {  // --env / -e
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0) return usage(fmt::format("--env needs NAME=VALUE, got \"{}\"", v.substr(0, eq)));
    o.env.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  }
  return {};
}

// Options with a value. Returns false (in `known`) when `name` is not one of them.
Status take_value_option(OptionArg& a, ParseState& st, bool& known) {
  static const std::vector<std::string_view> kNames = {
      "--priority", "--base", "--diff", "--secret-file", "--socket", "--host", "-w", "--workspace", "--cwd", "--timeout",
      "--cpus", "--from-seq", "--network", "--memory", "--env", "-e", "-c", "--listen"};
  known = std::find(kNames.begin(), kNames.end(), a.name) != kNames.end();
  if (!known) return {};
  auto v = a.value();
  if (!v) return v.error();
  CliOptions& o = st.o;
  const std::string& name = a.name;
  if (name == "--diff") o.screen_diff = *v;
  else if (name == "--secret-file") o.secret_file = *v;
  else if (name == "--cwd") o.cwd = *v;
  else if (name == "-c") o.shell_command = *v;
  else if (name == "--listen") o.listen_path = *v;
  else if (name == "--socket") {
    o.socket_path = *v;
    st.socket_given = true;
  } else if (name == "--host") {
    auto host = parse_ssh_url(*v);
    if (!host) return usage("--host " + host.error().message);
    o.host = std::move(*host);
    st.host_given = true;
  } else if (name == "-w" || name == "--workspace") {
    o.workspace_key = *v;
    o.workspace_key_given = true;
  } else {
    return take_checked_value(a, *v, o);
  }
  return {};
}

Status take_argument(const std::vector<std::string>& args, size_t& i, ParseState& st, bool& rest_is_command) {
  const std::string& arg = args[i];
  if (rest_is_command) {
    st.o.argv.push_back(arg);
    return {};
  }
  if (arg == "--") {
    rest_is_command = true;
    return {};
  }
  OptionArg a{args, i, arg, "", false};
  if (arg.rfind("--", 0) == 0) {
    if (auto eq = arg.find('='); eq != std::string::npos) {
      a.name = arg.substr(0, eq);
      a.inline_value = arg.substr(eq + 1);
      a.has_inline = true;
    }
  }
  if (a.name == "--secret" || a.name == "-s" || a.name.rfind("--secret=", 0) == 0) {
    // Never from argv (it would show in ps and shell history), and never echoed back.
    return usage("a secret is never taken from the command line; use --secret-file PATH or --secret-stdin");
  }
  if (take_switch(a.name, st.o)) return {};
  bool known = false;
  if (auto s = take_value_option(a, st, known); !s || known) return s;
  if (arg.size() > 1 && arg[0] == '-') return usage("unknown option " + a.name);
  st.positional.push_back(arg);
  return {};
}

Status check_workspace_verb(CliOptions& o, const std::vector<std::string>& positional) {
  const size_t extra = positional.size() - 1;
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
  return {};
}

Status check_cache_verb(CliOptions& o, const std::vector<std::string>& positional) {
  if (positional.size() < 2) return usage("cache needs status or clear");
  o.cache_action = positional[1];
  if (o.cache_action == "status") {
    if (positional.size() > 2) return usage("cache status takes no more arguments");
  } else if (o.cache_action == "clear") {
    if (positional.size() > 3) return usage("cache clear takes at most one REPOSITORY_ROOT");
    if (positional.size() == 3) o.cache_repository = positional[2];
  } else {
    return usage("unknown cache action \"" + o.cache_action + "\" (status or clear)");
  }
  return {};
}

// The verb and its operands.
Status check_verb(CliOptions& o, const std::vector<std::string>& positional) {
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
    return check_workspace_verb(o, positional);
  } else if (o.command == "cache") {
    return check_cache_verb(o, positional);
  } else if (o.command == "screen") {
    if (extra > 1) return usage("screen takes one BASE..HEAD, --diff FILE or --stdin");
    if (extra == 1) o.screen_range = positional[1];
    if ((extra == 1) + o.screen_diff.has_value() + o.screen_stdin + o.screen_rules != 1) {
      return usage("screen needs exactly one of BASE..HEAD, --diff FILE or --stdin");
    }
  } else if (o.command == "exec-remote") {
    if (extra > 0) return usage("exec-remote takes no arguments");
    if (o.stdio == !o.listen_path.empty()) return usage("exec-remote needs exactly one of --stdio and --listen SOCKET");
  } else if (o.command == "list" || o.command == "drain" || o.command == "resume") {
    if (extra > 0) return usage(o.command + " takes no arguments");
  } else {
    return usage("unknown command \"" + o.command +
                 "\" (run, attach, status, cancel, list, drain, resume, workspace, cache, exec-remote or screen)");
  }
  return {};
}

// Options that only some verbs take, and options that exclude each other.
Status check_combinations(const CliOptions& o) {
  if (o.wait && o.command != "drain") return usage("--wait is for drain");
  if ((o.screen_diff || o.screen_stdin || o.screen_rules) && o.command != "screen") {
    return usage("--diff, --stdin and --rules are for screen");
  }
  if ((o.stdio || !o.listen_path.empty()) && o.command != "exec-remote") return usage("--stdio and --listen are for exec-remote");
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
  if (o.command == "cache" && (o.secret_file || o.secret_stdin)) return usage("cache takes no secret");
  return {};
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
  motor cache status [--json] | motor cache clear [REPOSITORY_ROOT]
                                          (the operator's: the compile cache's warm targets, their
                                           sizes and limits; remove one repository's or all)
  motor run --untrusted [--base REV] ... | motor workspace prepare --untrusted [--base REV]
                                          (the runner screens the change from REV, default HEAD,
                                           and runs nothing unless it MAY EXECUTE)
  motor exec-remote (--stdio | --listen SOCKET)
                                          (an exec-remote/v1 endpoint for a caller on this machine:
                                           it snapshots and syncs each checkout; docs/exec-remote.md)
  motor screen (BASE..HEAD | --diff FILE | --stdin) [--json] | motor screen --rules
                                          (may this change be executed at all? exit 0 MAY EXECUTE,
                                           1 DO NOT EXECUTE, 2 error = DO NOT EXECUTE;
                                           docs/change-screen.md)

Inside a Git checkout, `run` first prepares the checkout's workspace (key -w KEY, else derived
from the checkout's path), then runs in the same directory relative to its root; --no-sync
skips that. A transfer shows its progress when stdout is a terminal. A checkout nothing changed
in since its last sync is not synced again; a watcher this client starts per checkout tells so
without a look at its files ($MOTOR_CHECKOUT_WATCH=0: none; docs/workspaces.md).

The socket is --socket, else $MOTOR_SOCKET, else /run/motor/motor.sock. --host (or $MOTOR_HOST)
reaches a runner on another host through OpenSSH and a reused control master, later calls on a
session a keeper opened beforehand ($MOTOR_SSH_SPARE=0: none); $MOTOR_SSH_COMMAND replaces `ssh`
and its options (docs/remote-callers.md). Options may come before or after other arguments. SIZE takes K, M or G (powers of 1024).

`run` streams the job's stdout and stderr and exits with the job's status: its exit code; 128+N
for signal N; 124 if killed at its deadline; 130 if cancelled (Ctrl-C cancels the job); 75 if
the runner refused for now (try again later); 69 for a lasting refusal; 64 for usage errors.

A direct job's secret is printed once on stderr, or written to a new 0600 file with
--secret-file. A secret is read only from a file or stdin, never from the command line.
)";
}

Expected<CliOptions> parse_cli(const std::vector<std::string>& args, const char* env_socket, const char* env_host) {
  ParseState st;
  st.o.socket_path = env_socket && *env_socket ? env_socket : kDefaultSocket;
  if (env_host && *env_host) {
    auto host = parse_ssh_url(env_host);
    if (!host) return usage("MOTOR_HOST=" + host.error().message);
    st.o.host = std::move(*host);
  }
  bool rest_is_command = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (auto s = take_argument(args, i, st, rest_is_command); !s) return s.error();
  }
  if (st.socket_given && st.host_given) return usage("give either --host or --socket, not both");
  if (st.socket_given) st.o.host.reset();  // an explicit socket wins over $MOTOR_HOST
  if (st.positional.empty()) return usage("no command given (run, attach, status, cancel or list)");
  if (auto s = check_verb(st.o, st.positional); !s) return s.error();
  if (auto s = check_combinations(st.o); !s) return s.error();
  return st.o;
}

bool is_screen_command(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") return false;
    if (!a.empty() && a[0] != '-') return a == "screen";
  }
  return false;
}

}  // namespace motor::client
