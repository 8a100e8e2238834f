// What the client's own background helpers share (the spare-session keeper, ssh_spare.hpp, and the
// checkout watcher, checkout_watch.hpp): this binary started detached with a flag of its own, one
// listener per socket path, and callers of this user only.
#pragma once

#include <sys/un.h>

#include <string>
#include <string_view>
#include <vector>

namespace motor::client {

// Starts this binary (named `motor` in ps) with `args` after argv[0], detached: its own session,
// nobody's child but init's (or the subreaper's), stdin/out/err on /dev/null, no other fd of ours,
// no blocked signal, `/` as its working directory. Returns once the intermediate child is reaped.
void start_detached_self(const std::vector<std::string>& args);

// `path` as a Unix socket address; false if it does not fit.
bool unix_address(const std::string& path, sockaddr_un& addr);

// Binds `fd` (SOCK_SEQPACKET) to `path`: false if another process listens there. A socket file
// nobody listens on (its owner was killed) is replaced.
bool bind_sole_listener(int fd, const std::string& path);

// The peer of a connected Unix socket runs as this process's user.
bool peer_is_this_user(int fd);

bool is_socket(const std::string& path);

// A directory only this user can enter, for its sockets: $XDG_RUNTIME_DIR/NAME, or /tmp/NAME-UID
// when that is unset or leaves fewer than `room` bytes of sun_path for a name in it; "" if neither
// can be made and checked (ours, mode 0700, not a symlink).
std::string private_runtime_dir(std::string_view name, size_t room);

}  // namespace motor::client
