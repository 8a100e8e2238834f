// One SSH session to `motor-runner connect` on a build host: the system's OpenSSH client (or
// $MOTOR_SSH_COMMAND, as GIT_SSH_COMMAND is for git) as a child process whose stdin and stdout are
// one end of a socket pair, riding a control master that later sessions reuse.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "client/ssh_target.hpp"
#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::client {

// Error codes of a remote connection, each with its own exit status (exit_codes.hpp).
inline constexpr const char* kHostUnreachable = "host_unreachable";  // 75: ssh could not reach the host
inline constexpr const char* kAuthRefused = "auth_refused";          // 77: the host refused our key (or its key is not known)
inline constexpr const char* kNotBridged = "not_bridged";            // 77: logged in, but no motor-runner connect answered
inline constexpr const char* kRunnerDown = "runner_down";            // 75: the bridge ran but no runner listens behind it
inline constexpr const char* kRunnerTooOld = "runner_too_old";       // 69: the runner does not speak this client's protocol

// How a session uses the control master: a call starts one if none answers; a spare session
// (ssh_spare.hpp) only rides one that is up, and fails rather than log in by itself.
enum class MasterUse { kRideOrStart, kRideOnly };

class SshSession {
 public:
  // Starts ssh; `socket` receives the client's end of the pair. `ssh_command` is
  // $MOTOR_SSH_COMMAND (null or empty: plain `ssh`).
  static Expected<SshSession> start(const SshTarget& target, const char* ssh_command, UniqueFd& socket,
                                    MasterUse master = MasterUse::kRideOrStart);
  // The control socket sessions to `target` with `ssh_command` ride, or "" when there is no
  // runtime directory for it (control_socket_dir).
  static std::string control_path_for(const SshTarget& target, const std::string& ssh_command);
  SshSession(SshSession&& other) noexcept;
  SshSession& operator=(SshSession&& other) noexcept;
  SshSession(const SshSession&) = delete;
  SshSession& operator=(const SshSession&) = delete;
  // Ends ssh if it still runs (its channel closes; the job, if any, runs on) and reaps it.
  ~SshSession();

  pid_t pid() const { return pid_; }
  const std::string& control_path() const { return control_path_; }
  // Reaps ssh if it has exited, without waiting: true once it is gone.
  bool exited();
  // Forgets ssh without ending it (it serves a call that outlives this object).
  void release() { pid_ = -1; }
  // The stream ended: waits (briefly) for ssh to exit and says why, as one line a caller can act
  // on. `runner_answered`: the runner had spoken on this session (so this is a lost transport).
  Error ended(bool runner_answered);
  // After a session that failed before the runner spoke: is its control master dead or stuck
  // (`ssh -O check`, bounded in time)? Then its socket is removed, so that the next session
  // starts a fresh master, and the answer is true (worth one more try).
  bool replace_dead_master();

  const SshTarget& target() const { return target_; }

 private:
  SshSession() = default;
  void reap(bool terminate);
  std::string stderr_text() const;

  SshTarget target_;
  std::string ssh_command_;   // $MOTOR_SSH_COMMAND, or ""
  std::string control_path_;  // ""  when no runtime directory could be had (no master then)
  pid_t pid_ = -1;
  int status_ = 0;            // once reaped
  UniqueFd stderr_;           // a memfd holding what ssh wrote on stderr
};

// Does the control master at `control_path` answer within `limit`? OpenSSH's multiplexing
// protocol (PROTOCOL.mux): a hello each way, then an alive check the master answers with its pid;
// a stopped or hung master does not. `ssh -O check` asks the same at the cost of a process; this
// is a round trip on a local socket.
bool control_master_answers(const std::string& control_path, std::chrono::milliseconds limit);

// The per-user directory that holds the control sockets: $XDG_RUNTIME_DIR/motor-ssh, else
// /tmp/motor-ssh-UID; created 0700, refused if someone else owns it. "" if none can be had.
std::string control_socket_dir();

}  // namespace motor::client
