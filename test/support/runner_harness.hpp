// Test support: a real motor-runner process on a temporary state directory and socket, a raw
// protocol client, and helpers that look at the real process table. Everything a test starts
// is stopped and removed in the destructors, also when the test fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace motor::test {

// Skips (or, under CI=true, fails) when the test cannot run here.
#define MOTOR_REQUIRE(cond, why)                                                   \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      if (::motor::test::in_ci()) FAIL() << "required under CI=true: " << (why);  \
      GTEST_SKIP() << (why);                                                       \
    }                                                                              \
  } while (0)

bool in_ci();
std::string make_temp_dir();
void remove_tree(const std::string& path);
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);
// A string unique to this test run, to find the processes a test started in /proc.
std::string unique_marker();
// Pids of processes whose command line contains `marker`.
std::vector<pid_t> processes_with(const std::string& marker);
// Paths matching a shell glob (none: empty).
std::vector<std::string> glob_paths(const std::string& pattern);
// Every entry under `dir` with its type, mode, owner, size and content: equal means unchanged.
std::string tree_listing(const std::string& dir);
// Peak resident set size (VmHWM) of a process, in bytes.
int64_t peak_rss_bytes(pid_t pid);

// The runner's child process named `name` (a helper: motor-starter, motor-state), or -1 after
// waiting 10 s for one.
pid_t helper_of(pid_t runner, const std::string& name);
// The runner's job starter process (sandbox/job_starter.hpp): helper_of(runner, "motor-starter").
pid_t job_starter_of(pid_t runner);
// "net:[inode]" of every network namespace `pid` holds through an open fd.
std::set<std::string> netns_fds_of(pid_t pid);
// Waits (at most 10 s) until the job starter holds `n` pooled network namespaces (it fills the
// pool when idle); besides them it holds an fd of its own namespace (`home`), which is not pooled.
std::set<std::string> full_pool(pid_t starter, size_t n, const std::string& home);

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};
// Runs a program with the given environment additions (in `cwd` if given); waits at most `timeout`.
CommandResult run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env_add = {},
                          std::chrono::seconds timeout = std::chrono::seconds(120), const std::string& cwd = "");
// The start of a shell script that makes a git repository `name` (in the current directory) with
// a test identity and enters it; the caller adds what to commit.
std::string git_init_script(const std::string& name);

// The small Linux guest the VM tests and benchmarks boot (scripts/build-test-guest, which builds
// it on first use and caches it per version of the script): its directory, or "" if it cannot be
// built.
std::string test_guest_dir();

class RunnerProcess {
 public:
  // `extra_config` is appended to a config naming a test cgroup parent and small limits.
  explicit RunnerProcess(std::string extra_config = "");
  ~RunnerProcess();
  RunnerProcess(const RunnerProcess&) = delete;
  RunnerProcess& operator=(const RunnerProcess&) = delete;

  // Starts (or restarts) the runner on the same state directory; waits for its socket.
  bool start();
  // Runs `binary` (e.g. MOTOR_RUNNER_TESTING_BIN) with `flags` before `serve` from the next start.
  void use_binary(std::string binary, std::vector<std::string> flags = {});
  const std::string& config_path() const { return config_path_; }
  // SIGTERM, then wait; returns the exit status (or -1).
  int stop(std::chrono::seconds timeout = std::chrono::seconds(30));
  void kill9();
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& dir() const { return dir_; }
  std::string workspace(const std::string& key, const std::string& caller = "root") const;
  std::string log() const;
  const std::string& cgroup_parent() const { return cgroup_parent_; }
  // Runs the `motor` client against this runner.
  CommandResult client(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(120)) const;
  // The same from directory `cwd` (e.g. inside a Git checkout, which `run` then syncs).
  CommandResult client_in(const std::string& cwd, const std::vector<std::string>& args,
                          const std::vector<std::string>& env_add = {},
                          std::chrono::seconds timeout = std::chrono::seconds(120)) const;

 private:
  std::string dir_, state_dir_, socket_, config_path_, log_path_, cgroup_parent_;
  std::string binary_;  // MOTOR_RUNNER_BIN unless use_binary() says otherwise
  std::vector<std::string> flags_;
  pid_t pid_ = -1;
};

// A protocol client on a raw socket, for what the CLI never sends.
class RawClient {
 public:
  explicit RawClient(const std::string& socket_path);
  // A session through `motor-runner connect --caller NAME`, as ssh would run it for a caller.
  static std::unique_ptr<RawClient> via_bridge(const std::string& socket_path, const std::string& caller);
  // A session with a program's stdin and stdout (`argv[0]` a path), its environment plus `env_add`;
  // closing the session is its EOF, and it is waited for (killed after 2 s).
  static std::unique_ptr<RawClient> via_program(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env_add = {});
  // A connection made by another account: a child switches to `uid`/`gid`, connects (so
  // SO_PEERCRED names that account) and hands the socket back. Null if that failed.
  static std::unique_ptr<RawClient> as_account(const std::string& socket_path, uid_t uid, gid_t gid);
  ~RawClient();
  bool connected() const { return fd_ >= 0; }
  bool send_bytes(const std::string& bytes);
  bool send_frame(const std::string& json);
  // The next frame's payload, or nullopt on EOF/timeout.
  std::optional<std::string> read_frame(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  // True once the runner has closed the connection (EOF within the timeout).
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  int fd() const { return fd_; }

 private:
  RawClient() = default;
  int fd_ = -1;
  pid_t bridge_pid_ = -1;
  std::string buffer_;
};

// Frames from `c` up to its terminal record (or an error reply, or the timeout), all of them.
std::vector<std::string> read_until_terminal(RawClient& c,
                                             std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

// Sends {"id":id,"method":method,"params":params} and returns the reply to that id (a result or
// an error; stream records of other requests are skipped), or "<no reply>".
std::string call_method(RawClient& c, int64_t id, const std::string& method, const std::string& params);
// runner.status over a fresh connection (its whole reply frame, or "").
std::string runner_status(const RunnerProcess& r, bool reset_stall = false);

// `text` as a JSON string literal, quotes included.
std::string json_quote(const std::string& text);

// The value of a top-level string or integer field in a JSON object (simple lookup for tests).
std::string json_field(const std::string& json, const std::string& path);

}  // namespace motor::test
