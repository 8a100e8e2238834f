#include "client/cli_spec.hpp"

namespace motor::client {
namespace {

using cli::OptionSpec;

const OptionSpec kSocket{"--socket", "", "PATH", "the runner's socket (else $MOTOR_SOCKET, else /run/motor/motor.sock)"};
const OptionSpec kHost{"--host", "", "ssh://[USER@]HOST[:PORT]",
                       "a runner on another host, through OpenSSH (else $MOTOR_HOST; docs/remote-callers.md)"};
const OptionSpec kJson{"--json", "", "", "print records as JSON lines"};
const OptionSpec kSecretFile{"--secret-file", "", "PATH", "read a direct job's secret from this file"};
const OptionSpec kSecretStdin{"--secret-stdin", "", "", "read a direct job's secret from stdin"};
const OptionSpec kWorkspace{"--workspace", "-w", "KEY", "the workspace key (default: derived from the checkout's path)"};
const OptionSpec kUntrusted{"--untrusted", "", "", "the runner screens the change first and runs nothing unless it MAY EXECUTE"};
const OptionSpec kBase{"--base", "", "REV", "with --untrusted: the trusted base revision (default HEAD)"};

// Its own function for its long description (client_program stays under 80 lines).
cli::VerbSpec cache_verb() {
  return {"cache", "(status | clear [REPOSITORY_ROOT])",
          "the operator's view of the compile cache, and its removal (docs/compile-cache.md)",
          "status measures the compile cache now (and applies cache_max_size and cache_max_age_s, as "
          "the periodic sweep does) and prints, per caller's repository, its published commit, the warm "
          "target's age, its size and the last fill's result; then the totals and the limits. clear "
          "removes one repository's fill workspace and warm target (every caller's of that path), or "
          "every repository's without REPOSITORY_ROOT; exec.status then shows it as never built. clear "
          "is refused (exit 75) while a fill of it is queued or running, or a workspace reads its "
          "target. Both are the operator's (root, or the runner's account): a caller is refused (exit 77).",
          {kSocket, kHost, kJson}};
}

}  // namespace

const cli::ProgramSpec& client_program() {
  static const cli::ProgramSpec program{
      .name = "motor",
      .section = "1",
      .summary = "run commands as sandboxed jobs on a Motor runner",
      .description =
          "motor sends a command to motor-runner(8), which runs it as a job in a sandbox of its own on the "
          "build host, and streams the job's stdout and stderr back. Inside a Git checkout, run first "
          "prepares the checkout's workspace on the runner, then runs in the same directory relative to its "
          "root.\n\n"
          "Options may come before or after other arguments. SIZE takes K, M or G (powers of 1024). A direct "
          "job's secret is printed once on stderr, or written to a new 0600 file with --secret-file; a secret "
          "is read only from a file or stdin, never from the command line.",
      .exit_status = "0-255: run: the job's exit code; 128+N for signal N\n"
                     "124: run: the job was killed at its deadline\n"
                     "130: run: the job was cancelled (Ctrl-C cancels it)\n"
                     "75: the runner refused for now; try again later\n"
                     "69: a lasting refusal\n"
                     "64: a usage error\n"
                     "screen: 0 MAY EXECUTE, 1 DO NOT EXECUTE, 2 error (= DO NOT EXECUTE)",
      .files = "/run/motor/motor.sock: the runner's socket (members of group motor may connect)",
      .see_also = "motor-runner(8), motor-runner.conf(5)",
      .verbs =
          {
              {"run", "(-- CMD [ARGS...] | -c 'SHELL COMMAND')", "run a command as a job and stream its output",
               "",
               {kSocket, kHost, kWorkspace,
                {"--no-sync", "", "", "do not prepare the checkout's workspace first"},
                {"--cwd", "", "DIR", "the job's working directory"},
                {"--timeout", "", "S", "seconds before the job is killed"},
                {"--cpus", "", "N", "CPU cores for the job"},
                {"--memory", "", "SIZE", "the job's memory limit"},
                {"--priority", "", "interactive|batch", "the admission queue's class"},
                {"--network", "", "offline|outbound", "outbound: public IPv4 through the runner's filter"},
                {"--env", "-e", "NAME=VALUE", "an environment variable for the job (repeatable)", true},
                {"-c", "", "'SHELL COMMAND'", "run this shell command line (bash -c; /bin/sh -c on a runner without bash)"},
                kJson,
                {"--direct", "", "", "a direct job: its one-time secret lets its holder attach, check or cancel it"},
                {"--secret-file", "", "PATH", "with --direct: write the secret to this new 0600 file"},
                kUntrusted, kBase}},
              {"attach", "JOB", "follow a job's output from the start or a seq", "",
               {kSocket, kHost, {"--from-seq", "", "N", "replay from this record"}, kJson, kSecretFile, kSecretStdin}},
              {"status", "[JOB]", "a job's state, or the runner's", "",
               {kSocket, kHost, kJson, {"--metrics", "", "", "the runner's Prometheus metrics"}, kSecretFile, kSecretStdin}},
              {"cancel", "JOB", "cancel a job", "", {kSocket, kHost, kSecretFile, kSecretStdin}},
              {"list", "", "the caller's jobs", "", {kSocket, kHost, kJson}},
              {"drain", "", "stop taking new jobs", "", {kSocket, kHost, {"--wait", "", "", "return once the runner is idle"}}},
              {"resume", "", "take new jobs again", "", {kSocket, kHost}},
              {"workspace", "(prepare | drop KEY | list)", "send this checkout's state to its workspace, drop one, list them",
               "", {kSocket, kHost, kWorkspace, kUntrusted, kBase}},
              cache_verb(),
              {"exec-remote", "(--stdio | --listen SOCKET)",
               "an exec-remote/v1 endpoint for a caller on this machine (docs/exec-remote.md)",
               "A caller that speaks exec-remote/v1, with no code of Motor's linked in, sends its requests here "
               "(frames: a 4-byte big-endian length, then one JSON object). exec.run and workspace.prepare name "
               "the caller's checkout by its path (workspace_key): the endpoint snapshots it as it is on disk, "
               "syncs it to the runner and relays the runner's stream; the other methods are relayed as they "
               "are. Each request gets a runner connection of its own.",
               {kSocket, kHost,
                {"--stdio", "", "", "one caller on stdin and stdout, until stdin ends"},
                {"--listen", "", "SOCKET", "callers of this account on a Unix socket (mode 0600), until SIGTERM"}}},
              {"screen", "(BASE..HEAD | --diff FILE | --stdin | --rules)",
               "may this change be executed at all? (docs/change-screen.md)", "",
               {{"--diff", "", "FILE", "screen this diff"},
                {"--stdin", "", "", "screen the diff on stdin"},
                {"--rules", "", "", "print the rules"},
                kJson}},
              {"docs", "", "print a generated text (for packaging)", "",
               {{"--man", "", "", "motor(1)"}, {"--completion", "", "", "bash completion for motor"}}},
          },
  };
  return program;
}

}  // namespace motor::client
