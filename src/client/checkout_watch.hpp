// Watching a checkout between calls (issue 20: the no-change run). The stat fingerprint
// (checkout_fingerprint.hpp) costs one lstat per file on every run; a watcher makes that one round
// trip. It is this binary, detached (`motor --checkout-watcher ROOT SOCKET`), one per checkout,
// holding inotify watches on every directory of the work tree and a mark on every file's inode,
// and counting batches of events (its generation). A fingerprint taken after the watcher answered
// (instance I, generation G) is still true while the same watcher answers (I, G): no event since
// means no change since (the kernel queues an event inside the syscall that makes the change,
// before it returns; a query reads every queued event before it answers).
//
// Why a mark on every file and not only the directories: an inode mark sees a write through any
// name of the file, also a hard link made from outside the checkout, and a new link's link count.
// Writes through a shared mapping make no event of their own; the close of the file they were
// opened for writing does, so a mapping opened before the watcher started is the one case left
// (docs/workspaces.md).
//
// Directories git ignores wholly when the watcher starts (`git ls-files --others --ignored
// --directory`: target/, node_modules/) are not watched; the watcher names them in its answer and
// the fingerprint is only vouched for when none of its files lies in one. The watcher ends when it
// can no longer vouch (a .gitignore or git's config or exclude file changed, a directory moved, the
// event queue overflowed, the root went away), after 600 s without a query, when its socket is
// removed or taken over, and on SIGTERM/SIGHUP; a checkout bigger than its budget of watches gets
// an answer "none" until then. MOTOR_CHECKOUT_WATCH=0 turns it off for a caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace motor::client {

struct WatchState {
  uint64_t instance = 0;    // random per watcher process
  uint64_t generation = 0;  // moves on every batch of events it read
  std::vector<std::string> unwatched;  // directories it does not watch, relative, each ending in '/'
};

// Is watching on for this caller (MOTOR_CHECKOUT_WATCH is not "0")?
bool checkout_watch_enabled();

// Where the watcher of the checkout at `root` listens ("" without a private runtime directory).
std::string checkout_watch_socket(const std::string& root);

// What the watcher at `socket` answers for `root`: nullopt if none answered, or it cannot vouch
// for this checkout. `start_one` says whether a new watcher should be started (none listens, or
// the one that did ended without an answer).
std::optional<WatchState> ask_checkout_watcher(const std::string& socket, const std::string& root, bool* start_one);

// Starts a watcher for `root` detached from this process; it gives up by itself if another one
// already listens on `socket`.
void start_checkout_watcher(const std::string& root, const std::string& socket);

// For a sync: the watcher's answer when watching is on, starting a watcher when none answered.
std::optional<WatchState> checkout_watch_state(const std::string& root);

// The watcher's main (`motor --checkout-watcher ROOT SOCKET`): 0 after a normal end.
int run_checkout_watcher(int argc, char** argv);
inline constexpr const char* kCheckoutWatcherFlag = "--checkout-watcher";

}  // namespace motor::client
