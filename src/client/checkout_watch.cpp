#include "client/checkout_watch.hpp"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "base/inotify_tree.hpp"
#include "client/checkout_fingerprint.hpp"
#include "client/detached_helper.hpp"
#include "client/git_process.hpp"
#include "motor/unique_fd.hpp"

extern char** environ;

namespace motor::client {
namespace {

constexpr std::string_view kQuery = "motor-watch? ";
constexpr std::string_view kAnswer = "motor-watch 1 ";
// A watcher nobody asked for this long ends (its watches pin inodes in the kernel's cache).
constexpr std::chrono::seconds kIdleLimit{600};
constexpr int kTickMs = 1000;
// A watcher answers at once; a stuck one costs a call this, then the call checks every file.
constexpr int kAnswerWaitMs = 200;
// Watches are the user's (fs.inotify.max_user_watches), shared with their editors and tools.
constexpr size_t kMaxWatches = 65536;
constexpr size_t kMaxAnswer = 60000;

size_t watch_budget() { return std::min(kMaxWatches, InotifyTree::user_watch_limit(kMaxWatches * 4) / 4); }

// Directories git ignores wholly (`target/`), from the checkout's own rules and index.
std::set<std::string> ignored_directories(const std::string& root) {
  std::set<std::string> out;
  auto r = git({"-C", root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"}, {},
               GitIo{.input = {}, .out_fd = -1, .wait = true, .timeout_ms = 30000});
  if (!r || r->status != 0) return out;
  for (size_t at = 0; at < r->out.size();) {
    const size_t end = r->out.find('\0', at);
    const std::string entry = r->out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (entry.ends_with('/') && entry.find('\n') == std::string::npos) out.insert(entry);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

uint64_t random_instance() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) v = static_cast<uint64_t>(getpid()) << 32 | 1;
  }
  return v;
}

// What a watcher can say: still walking the tree, cannot vouch for it, or its state.
enum class Phase { kWalking, kCannot, kWatching };

// Answers one query on `conn`: false when the watcher cannot vouch any more (it then ends).
bool answer(int conn, const std::string& root, Phase phase, InotifyTree* watch, uint64_t instance,
            const std::string& unwatched, const std::optional<ConfigRecords>& config, const std::string& git_dir) {
  pollfd p{conn, POLLIN, 0};
  if (poll(&p, 1, kAnswerWaitMs) != 1) return true;
  char buf[8192];
  const ssize_t n = ::recv(conn, buf, sizeof buf, 0);
  if (n <= 0 || std::string_view(buf, static_cast<size_t>(n)) != std::string(kQuery) + root) return true;
  std::string reply(kAnswer);
  if (phase == Phase::kWalking) {
    reply += "busy\n";
  } else if (phase == Phase::kCannot) {
    reply += "none\n";
  } else {
    watch->drain();
    // What git was told to ignore when the watcher started holds while its config and exclude
    // files do.
    if (watch->broken() || watch->gitignore_touched() || config_records(git_dir) != config) return false;
    reply += fmt::format("{} {}\n{}", instance, watch->generation(), unwatched);
  }
  (void)::send(conn, reply.data(), reply.size(), MSG_NOSIGNAL);  // a caller gone already: its loss
  return true;
}

}  // namespace

bool checkout_watch_enabled() {
  const char* v = std::getenv("MOTOR_CHECKOUT_WATCH");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::string checkout_watch_socket(const std::string& root) {
  const std::string dir = private_runtime_dir("motor-watch", 1 + 16 + 6);
  return dir.empty() ? "" : fmt::format("{}/{:016x}.watch", dir, path_hash(root));
}

std::optional<WatchState> ask_checkout_watcher(const std::string& socket_path, const std::string& root, bool* start_one) {
  *start_one = false;
  sockaddr_un addr;
  if (!unix_address(socket_path, addr)) return std::nullopt;
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return std::nullopt;
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    *start_one = errno == ENOENT || errno == ECONNREFUSED;
    return std::nullopt;
  }
  const std::string query = std::string(kQuery) + root;
  if (!peer_is_this_user(fd.get()) || ::send(fd.get(), query.data(), query.size(), MSG_NOSIGNAL) < 0) return std::nullopt;
  pollfd p{fd.get(), POLLIN, 0};
  if (poll(&p, 1, kAnswerWaitMs) != 1) return std::nullopt;
  std::string reply(kMaxAnswer + 64, '\0');
  const ssize_t n = ::recv(fd.get(), reply.data(), reply.size(), 0);
  if (n <= 0) {
    *start_one = n == 0;  // it ended rather than vouch: a fresh one walks the tree anew
    return std::nullopt;
  }
  reply.resize(static_cast<size_t>(n));
  if (!reply.starts_with(kAnswer)) return std::nullopt;
  const std::string_view text = std::string_view(reply).substr(kAnswer.size());
  const size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  const std::string_view head = text.substr(0, nl);
  WatchState state;
  const size_t space = head.find(' ');
  if (space == std::string_view::npos) return std::nullopt;  // "none": too big to watch
  auto a = std::from_chars(head.data(), head.data() + space, state.instance);
  auto b = std::from_chars(head.data() + space + 1, head.data() + head.size(), state.generation);
  if (a.ec != std::errc() || b.ec != std::errc() || b.ptr != head.data() + head.size() || state.instance == 0) return std::nullopt;
  for (size_t at = nl + 1; at < text.size();) {
    const size_t end = text.find('\n', at);
    if (end == std::string_view::npos) return std::nullopt;
    state.unwatched.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return state;
}

void start_checkout_watcher(const std::string& root, const std::string& socket) {
  start_detached_self({kCheckoutWatcherFlag, root, socket});
}

std::optional<WatchState> checkout_watch_state(const std::string& root) {
  if (!checkout_watch_enabled()) return std::nullopt;
  const std::string socket = checkout_watch_socket(root);
  if (socket.empty()) return std::nullopt;
  bool start_one = false;
  auto state = ask_checkout_watcher(socket, root, &start_one);
  if (!state && start_one) start_checkout_watcher(root, socket);
  return state;
}

int run_checkout_watcher(int argc, char** argv) {
  if (argc != 4) return 64;
  const std::string root = argv[2];
  const std::string path = argv[3];
  if (root.empty() || root[0] != '/' || root.find('\n') != std::string::npos || checkout_watch_socket(root) != path) return 64;
  // Git as the checkout's own rules say, never traced into a caller's files.
  std::vector<std::string> git_vars;
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).starts_with("GIT_")) git_vars.emplace_back(*e, std::strcspn(*e, "="));
  }
  for (const auto& v : git_vars) unsetenv(v.c_str());
  catch_stop_signals();
  auto listener = SoleListener::open(path);
  if (!listener) return 0;

  // The config first: a change after this reading ends the watcher at its next query. The walk
  // (git's ignored directories, then a watch per directory and file) runs beside the loop, which
  // answers "busy" meanwhile: a call never waits for it.
  const std::string git_dir = root + "/.git";
  const auto config = config_records(git_dir);
  std::string unwatched_text;
  std::optional<InotifyTree> tree;
  bool watching = false;
  std::atomic<bool> walked{false};
  auto walk = [&] {
    std::set<std::string> unwatched;
    for (const auto& d : ignored_directories(root)) {
      unwatched_text += d + "\n";
      unwatched.insert(d.substr(0, d.size() - 1));
    }
    tree.emplace(root, std::move(unwatched), watch_budget(), true);
    // (A config file that cannot be looked at: no fingerprint either; "none", not a new watcher per call.)
    watching = config && unwatched_text.size() <= kMaxAnswer && tree->start();
    walked = true;
  };
  std::thread walker;
  try {
    walker = std::thread(walk);
  } catch (const std::system_error&) {
    walk();
  }
  const uint64_t instance = random_instance();

  auto last_query = std::chrono::steady_clock::now();
  for (;;) {
    const bool ready = walked.load();
    if (ready && walker.joinable()) walker.join();
    const Phase phase = !ready ? Phase::kWalking : watching ? Phase::kWatching : Phase::kCannot;
    pollfd p[2] = {{listener->fd(), POLLIN, 0}, {phase == Phase::kWatching ? tree->fd() : -1, POLLIN, 0}};
    const int polled = poll(p, 2, ready ? kTickMs : 10);
    if (stop_requested() || (polled < 0 && errno != EINTR)) break;
    if (polled > 0 && (p[1].revents & POLLIN)) {
      tree->drain();
      if (tree->broken() || tree->gitignore_touched()) break;
    }
    if (polled > 0 && (p[0].revents & POLLIN)) {
      UniqueFd conn(accept4(listener->fd(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn && peer_is_this_user(conn.get())) {
        last_query = std::chrono::steady_clock::now();
        if (!answer(conn.get(), root, phase, phase == Phase::kWatching ? &*tree : nullptr, instance, unwatched_text, config, git_dir)) break;
      }
    }
    if (std::chrono::steady_clock::now() - last_query > kIdleLimit) break;
    if (!listener->still_ours()) break;  // removed, or another watcher's now
    // The root's own watch says when it goes; this says it too if something holds the directory.
    struct stat now {};
    if (::lstat(root.c_str(), &now) < 0 || !S_ISDIR(now.st_mode)) break;
  }
  if (walker.joinable()) walker.join();
  return 0;  // the listener's file removed if still ours
}

}  // namespace motor::client
