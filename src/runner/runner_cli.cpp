#include "runner/runner_cli.hpp"

namespace motor::runner {
namespace {

const cli::OptionSpec kConfig{"--config", "", "FILE",
                              "the config file (default /etc/motor/motor-runner.conf when it exists, else the "
                              "embedded defaults)"};
const cli::OptionSpec kStateDir{"--state-dir", "", "DIR", "overrides state_dir"};
const cli::OptionSpec kSocket{"--socket", "", "PATH", "overrides socket_path"};

}  // namespace

const cli::ProgramSpec& runner_program() {
  static const cli::ProgramSpec program{
      .name = "motor-runner",
      .section = "8",
      .summary = "run sandboxed jobs for coding agents on a shared build host",
      .description =
          "motor-runner is the daemon of Motor: on one event loop it accepts jobs over a Unix socket "
          "(motor(1) is the client), runs each in its own cgroup, namespaces and seccomp sandbox as an "
          "unprivileged account, and streams its output back. It runs as root, under systemd as "
          "motor-runner.service (Type=notify, with a watchdog).\n\n"
          "SIGTERM stops it (running jobs are killed or finished as the config's shutdown says). SIGHUP "
          "reads the config again and takes the keys that may change while running; it logs the changed "
          "keys that need a restart and never stops the runner.\n\n"
          "The runner logs to stderr, or straight to the journal (with the fields MOTOR_JOB_ID, "
          "MOTOR_CALLER, MOTOR_OUTCOME) when stderr is the stream systemd connected (JOURNAL_STREAM). "
          "It keeps no log file of its own, so SIGHUP has none to reopen.",
      .exit_status = "0: success (check-config: the config is valid; gate: every control held)\n"
                     "1: the runner could not start, or a gate control failed\n"
                     "64: a usage error\n"
                     "78: a config error, naming the file, line and key",
      .files = "/etc/motor/motor-runner.conf: the config (motor-runner.conf(5))\n"
               "/run/motor/motor.sock: the socket clients connect to\n"
               "/var/lib/motor: state, job logs, workspaces",
      .see_also = "motor(1), motor-runner.conf(5), systemd.service(5)",
      .verbs =
          {
              {"serve", "", "run the daemon (as root)", "", {kConfig, kStateDir, kSocket}},
              {"check-config", "[FILE]", "validate a config file, like sshd -t: exit 0 if valid, 78 with the error",
               "FILE defaults to --config, else /etc/motor/motor-runner.conf (the embedded defaults when it "
               "does not exist). Checks everything serve checks before it starts, cache_paths included.",
               {kConfig}},
              {"connect", "", "bridge stdin/stdout to the runner's socket (an authorized_keys forced command)",
               "In authorized_keys: command=\"motor-runner connect --caller alice\" ssh-ed25519 ...",
               {{"--caller", "", "NAME", "the caller this key stands for"}, kConfig, kSocket}},
              {"gate", "", "host checks, then attacks as real jobs; exit 0 only if every control held",
               "The attacks run through a runner started with this config (temporary state directory and "
               "socket unless --state-dir); docs/server-gate.md.",
               {kConfig, kStateDir,
                {"--attack", "", "ID[,ID...]", "run only the named attacks", true},
                {"--json", "", "", "one JSON report on stdout"}}},
              {"print-config", "", "print the default config (conf/motor-runner.conf)", "", {}},
              {"docs", "", "print a generated reference text (for packaging and the repository's checks)", "",
               {{"--config-reference", "", "", "the key tables of docs/configuration.md"},
                {"--config-man", "", "", "motor-runner.conf(5)"},
                {"--man", "", "", "motor-runner(8)"},
                {"--completion", "", "", "bash completion for motor-runner"}}},
          },
  };
  return program;
}

}  // namespace motor::runner
