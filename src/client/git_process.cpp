#include "client/git_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "motor/unique_fd.hpp"

extern char** environ;

namespace motor::client {
namespace {

// git's absolute path, found on PATH once: every spawn would otherwise search PATH again.
const std::string& git_path() {
  static const std::string path = [] {
    const char* env_path = getenv("PATH");
    std::string_view dirs = env_path ? env_path : "/usr/bin:/bin";
    while (!dirs.empty()) {
      const auto colon = dirs.find(':');
      const std::string dir(dirs.substr(0, colon));
      dirs.remove_prefix(colon == std::string_view::npos ? dirs.size() : colon + 1);
      const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/git";
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return std::string("/usr/bin/git");
  }();
  return path;
}

// The caller's environment with `extra` (NAME=VALUE) replacing or adding variables.
std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    bool overridden = false;
    for (const auto& x : extra) overridden |= v.substr(0, v.find('=') + 1) == std::string_view(x).substr(0, x.find('=') + 1);
    if (!overridden) env.emplace_back(v);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Writes `input` to git's stdin. A git that already died must not take the client with it:
// SIGPIPE is held back for the write (EPIPE then) and a pending one taken away.
Status feed(int fd, const std::string& input) {
  sigset_t pipe_only, old_mask;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  const ssize_t n = write(fd, input.data(), input.size());
  const timespec no_wait{0, 0};
  while (sigtimedwait(&pipe_only, nullptr, &no_wait) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (n != static_cast<ssize_t>(input.size())) return Error{"io", "writing to git failed"};
  return {};
}

// Milliseconds left until `deadline`, -1 (no bound) when there is none.
int remaining_ms(std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Reads git's stdout and stderr to their ends, then waits for it. Past the deadline its process
// group (git and what it started, ssh for one) is killed: an origin that never answers would
// otherwise hold the caller forever.
void collect(pid_t pid, int out_fd, int err_fd, int timeout_ms, GitRun& r) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout_ms > 0) deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (open_fds > 0) {
    const int ready = poll(fds, 2, remaining_ms(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0) {
      ::kill(-pid, SIGKILL);
      r.timed_out = true;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Expected<GitRun> git(const std::vector<std::string>& args, const std::vector<std::string>& extra, const GitIo& io) {
  std::vector<std::string> env_store = environment_with(extra);
  std::vector<std::string> all{"git"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> env = pointers(env_store), argv = pointers(all);
  int out[2], err[2], in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) < 0) return Error{"io", "pipe failed"};
  UniqueFd o(out[0]), o_write(out[1]);
  if (pipe2(err, O_CLOEXEC) < 0) return Error{"io", "pipe failed"};
  UniqueFd e(err[0]), e_write(err[1]);
  if (!io.input.empty() && pipe2(in, O_CLOEXEC) < 0) return Error{"io", "pipe failed"};
  UniqueFd i_read(in[0]), i_write(in[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in[0] >= 0) posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!io.wait) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  } else {
    posix_spawn_file_actions_adddup2(&fa, io.out_fd >= 0 ? io.out_fd : out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (io.timeout_ms > 0) {
    // Its own process group, so that a timeout kills what git started as well.
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, git_path().c_str(), &fa, &attr, argv.data(), env.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  o_write.reset();
  e_write.reset();
  i_read.reset();
  if (rc != 0) return Error{"io", fmt::format("cannot run git: {}", std::strerror(rc))};
  if (!io.input.empty()) {
    if (auto s = feed(i_write.get(), io.input); !s) return s.error();
  }
  i_write.reset();
  GitRun r;
  if (!io.wait) {
    r.pid = pid;
    return r;
  }
  collect(pid, o.get(), e.get(), io.timeout_ms, r);
  return r;
}

void reap(pid_t pid) {
  if (pid <= 0) return;
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace motor::client
