// Spare SSH sessions: after a call over SSH, a keeper process (this binary, detached) holds one
// session to `motor-runner connect` already open on the control master, and hands it to the next
// call over a Unix socket beside the master's (SCM_RIGHTS), then opens the next spare. A call
// then costs its own requests, not an SSH session's start (docs/remote-callers.md).
//
// The keeper says runner.hello on each spare as it opens it and keeps the answer: a call that
// takes a spare whose answer came checks that answer (runner.hello's own checks) and sends its
// requests at once, with no round trip before them; one that takes a spare still waiting for it
// reads it first. A spare that fails the hello, or says anything else, ends the keeper.
//
// The keeper never logs in by itself: its sessions only ride a master a call started
// (MasterUse::kRideOnly). It exits when a spare ends (the master or the runner went away), when its
// socket is removed or taken over, and after 300 s without a call, as the master's
// ControlPersist; sessions it handed out serve their calls to the end. MOTOR_SSH_SPARE=0 turns it
// off for a caller.
#pragma once

#include <optional>
#include <string>

#include "client/ssh_target.hpp"
#include "motor/unique_fd.hpp"

namespace motor::client {

// The keeper's socket for the master at `control_path`.
std::string spare_keeper_path(const std::string& control_path);

// What a call got from the keeper at `keeper_path`.
struct SpareAnswer {
  bool keeper_answered = false;  // false: no keeper listens (start one after the call's own session)
  UniqueFd session;              // the spare's stream, if it had one
  std::optional<std::string> hello_reply;  // the runner's answer to the keeper's runner.hello, if it came
  bool hello_sent = false;       // no answer yet: it is the first frame on the stream
};
SpareAnswer take_spare_session(const std::string& keeper_path);

// Is the keeper on for this caller (MOTOR_SSH_SPARE is not "0")?
bool spare_sessions_enabled();

// Starts a keeper for `target` detached from this process (its own session, not our child); it
// gives up by itself if another keeper already holds `keeper_path`.
void start_spare_keeper(const SshTarget& target, const std::string& ssh_command, const std::string& control_path);

// The keeper's main (`motor --ssh-spare-keeper ...`, as start_spare_keeper runs it): the exit
// status, 0 after a normal end.
int run_spare_keeper(int argc, char** argv);
inline constexpr const char* kSpareKeeperFlag = "--ssh-spare-keeper";

}  // namespace motor::client
