// What the client's own background helpers share (the spare-session keeper, ssh_spare.hpp, and the
// checkout watcher, checkout_watch.hpp): this binary started detached with a flag of its own, one
// listener per socket path, and callers of this user only.
#pragma once

#include <sys/types.h>
#include <sys/un.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/unique_fd.hpp"

namespace motor::client {

// Starts this binary (named `motor` in ps) with `args` after argv[0], detached: its own session,
// nobody's child but init's (or the subreaper's), stdin/out/err on /dev/null, no other fd of ours,
// no blocked signal, `/` as its working directory. Returns once the intermediate child is reaped.
void start_detached_self(const std::vector<std::string>& args);

// `path` as a Unix socket address; false if it does not fit.
bool unix_address(const std::string& path, sockaddr_un& addr);

// A helper's SOCK_SEQPACKET listener at `path`, held by it alone: nullopt if another process
// listens there (a socket file nobody listens on, its owner killed, is replaced). still_ours()
// says whether the file is still the one it bound (not removed, not taken over); the destructor
// removes the file if so.
class SoleListener {
 public:
  static std::optional<SoleListener> open(const std::string& path);
  SoleListener(SoleListener&& other) noexcept;
  SoleListener& operator=(SoleListener&&) = delete;
  SoleListener(const SoleListener&) = delete;
  ~SoleListener();
  int fd() const { return fd_.get(); }
  bool still_ours();

 private:
  SoleListener(UniqueFd fd, std::string path, dev_t dev, ino_t ino) : fd_(std::move(fd)), path_(std::move(path)), dev_(dev), ino_(ino) {}
  UniqueFd fd_;
  std::string path_;
  dev_t dev_;
  ino_t ino_;
  bool owned_ = true;
};

// A helper's stop signals: SIGTERM and SIGHUP set a flag (no SA_RESTART: they interrupt its wait;
// at worst one is seen a tick later), SIGPIPE is ignored.
void catch_stop_signals();
bool stop_requested();

// The peer of a connected Unix socket runs as this process's user.
bool peer_is_this_user(int fd);

bool is_socket(const std::string& path);

// A directory only this user can enter, for its sockets: $XDG_RUNTIME_DIR/NAME, or /tmp/NAME-UID
// when that is unset or leaves fewer than `room` bytes of sun_path for a name in it; "" if neither
// can be made and checked (ours, mode 0700, not a symlink).
std::string private_runtime_dir(std::string_view name, size_t room);

}  // namespace motor::client
