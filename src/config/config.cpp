#include "config/config.hpp"
#include "base/ipv4.hpp"

#include "protocol/size.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

#include "motor/unique_fd.hpp"
#include "config/env_filter.hpp"

namespace motor::config {
namespace {

// Kept identical to conf/motor-runner.conf (a unit test checks both).
constexpr std::string_view kDefaultConfigText = R"motorconf(# motor-runner configuration.
#
# Format: one `key = value` per line. A line whose first non-blank character is `#` is a
# comment, and so is everything from a `#` that follows a blank. Values may be bare or in double
# quotes (inside quotes, \" is a quote and \\ a backslash). Lists are comma-separated. Sizes take
# a K, M or G suffix (powers of 1024). Every key is optional: a key left out keeps the default
# shown here. Unknown keys, keys given twice and bad values are errors naming the line and key.
# Full reference: docs/configuration.md.

# --- Where the runner listens and keeps its state -------------------------------------------

# The Unix socket clients connect to (mode 0660). Absolute path, at most 107 bytes.
socket_path = /run/motor/motor.sock
# The socket's group: members may connect if allowed_groups also lets them.
socket_group = motor
# state.json, job logs and (by default) workspaces live here. Absolute path.
state_dir = /var/lib/motor
# Per-caller workspaces. Empty: <state_dir>/workspaces. Otherwise an absolute path.
workspace_root = ""

# Who may talk to the runner (checked with SO_PEERCRED): these uids, and members of these groups.
allowed_uids = 0
allowed_groups = motor

# --- Jobs -------------------------------------------------------------------------------------

# The unprivileged account every job runs as (never root).
job_user = motor-job
# The runner's own cgroup, under the root of each hierarchy; jobs get one cgroup each below it.
cgroup_parent = motor
# Which cgroup hierarchy to use: auto (v2 when mounted, otherwise v1), v2 or v1.
cgroup_mode = auto
# Timeout of a job that asks for none, and the longest a job may ask for (seconds).
default_timeout_s = 600
max_timeout_s = 86400
# CPUs (whole cores) of a job that asks for none.
default_cpus = 1
# Memory of a job that asks for none, and the most a job may ask for.
default_memory = 2G
max_memory = 16G
# Most processes and threads in one job.
pids_max = 4096
# Most jobs running at once; more wait in the queue.
max_running_jobs = 64
# Jobs that cannot start yet wait in a queue (FIFO per priority class): at most this many.
max_queued_jobs = 256
# Longest a job waits in the queue before it is refused (queue_wait_exceeded); a request may ask for less.
queue_wait_limit_s = 3600
# Claims per CPU core: 1 never shares a core; 2 lets two jobs share one when every core is claimed.
cpu_oversubscription = 1
# Job memory caps are reserved against the host's memory minus this reserve.
memory_reserve = 1G
# Below this much free space on the workspace filesystem, new jobs are refused (runner_disk_full).
disk_free_floor = 1G
# Metrics in Prometheus text format, rewritten atomically for node_exporter's textfile collector ("" = off).
metrics_file = ""
# Most bytes of command, argv and environment in one request.
max_argument_size = 256K
# motor-init, PID 1 of every job's sandbox. Empty: the motor-init beside motor-runner.
init_path = ""
# Shared caches every job sees read-only at the same path (Cargo registry, git sources, compile
# cache). Absolute paths that exist; "" for none.
cache_paths = ""
# Size cap of each job's private /tmp (a tmpfs).
job_tmp_size = 1G
# Buildbarn's build directory (docs/buildbarn.md): root and the runner's account (motor-bb-runner)
# may run a job on an input root below it (exec.run's host_workspace). "" = off.
bb_build_directory = ""
# Workspaces: the account that owns the Git mirrors and parses uploaded bundles (never root),
# and the largest bundle one workspace.prepare may send.
workspace_git_user = motor-cache
max_bundle_size = 1G

# --- Output and history -----------------------------------------------------------------------

# Output kept on disk per job (for replay); older output is dropped beyond this.
job_log_max_size = 1G
# Output in flight per client; a client that reads slower than this waits (backpressure).
client_buffer_size = 1M
# Output in flight to all clients together; past it, the clients that read nothing are cut off
# (they reattach from their last seq; nothing is lost).
client_buffer_total = 256M
# A client that reads nothing for this long while its job has more for it is dropped from the
# job's stream with a "stalled" error naming where to reattach (its output stays in the history).
stalled_client_timeout_s = 60
# Finished jobs whose records and logs are kept.
finished_jobs_kept = 1000
# Seconds a finished job's output history is kept; after that an attach answers history_expired.
job_log_max_age_s = 604800

# --- Sessions and shutdown --------------------------------------------------------------------

# Most client connections at once, and of one account (uid, or caller named by the SSH bridge);
# the operator (root) and the runner's own account are not counted per account.
max_sessions = 1024
max_sessions_per_uid = 256
# A connection that begins a frame and does not finish it within this many seconds is closed.
frame_timeout_s = 30
# A connection that sends nothing and waits for nothing (no job followed, no reply owed) this long is closed.
session_idle_timeout_s = 900
# Direct jobs: exec.run with direct: true gets a one-time secret that lets its holder attach,
# check status or cancel that job only (docs/direct-runs.md). true or false.
direct_jobs = false

# On SIGTERM: kill running jobs, or finish (let them run up to shutdown_grace_s, then kill).
shutdown = kill
shutdown_grace_s = 30

# --- Outbound network -------------------------------------------------------------------------

# Whether a job may ask for network: "outbound" (public IPv4 only; docs/job-isolation.md).
# false refuses such jobs with network_unsupported. true or false.
outbound_network = false
# The network namespace whose routes reach the internet, by name (/run/netns/NAME); "" is the
# runner's own (the host's).
outbound_uplink_netns = ""
# Resolvers the jobs' filtering resolver forwards to (IPv4). "": the nameservers in /etc/resolv.conf.
outbound_resolvers = ""
# Addresses of the jobs' links (a /30 each) and the egress namespace. Pick one the uplink does not use.
outbound_subnet = 100.88.0.0/16

# --- Environment ------------------------------------------------------------------------------

# Caller environment variables forwarded to jobs, besides RUST_*, CARGO_*, NEXTEST_*, LC_*,
# RUSTFLAGS and RUSTDOCFLAGS. An entry ending in * is a prefix. Names containing TOKEN, SECRET,
# PASSWORD, KEY or CREDENTIAL, SSH_AUTH_SOCK, PATH, HOME, USER and LOGNAME are never forwarded.
env_allow = CC, CXX, CFLAGS, CXXFLAGS, CPPFLAGS, LDFLAGS, MAKEFLAGS, LANG, LC_ALL, TZ, TERM, NO_COLOR, PKG_CONFIG_PATH, GOFLAGS, PYTHONDONTWRITEBYTECODE

# --- Windows jobs (VMs through libvirt; docs/windows-jobs.md) --------------------------------

# The sealed qcow2 image every VM job boots from, through an overlay of its own; never written.
# Empty: platform "windows" jobs are refused (platform_unsupported).
vm_image = ""
# Direct kernel boot instead of the image's boot loader (the Linux test guest); empty for Windows.
vm_kernel = ""
vm_initrd = ""
vm_kernel_cmdline = ""
# The libvirt connection (its event loop runs on the runner's loop).
libvirt_uri = qemu:///system
# QEMU without KVM (TCG, software emulation) is refused unless this is true.
allow_emulation = false
# auto: KVM when motor-qemu can open /dev/kvm and run a test guest on it and this host's KVM can
# boot a stock kernel (checked at start), else TCG if allow_emulation = true, else VM jobs are
# refused. kvm: KVM or refuse. tcg: always TCG (needs allow_emulation = true).
vm_accelerator = auto
# Per-job overlays and agent sockets, and per-workspace persistent data disks. Every directory
# above them must be searchable by motor-qemu.
vm_dir = /var/lib/motor/vm
vm_data_dir = /var/lib/motor/vm-data
# Size of a new data disk (sparse), and memory QEMU may use beyond the guest's RAM.
vm_data_disk_size = 8G
vm_memory_overhead = 512M
# What the guest agent runs: RUNNER STDOUT_FILE STDERR_FILE CHANGES_FILE CWD COMMAND... in the guest.
vm_guest_runner = /motor/run
# How long the guest agent may take to answer after the VM starts (seconds).
vm_agent_timeout_s = 300
# Most output read from one VM job; the rest is dropped with a note on stderr.
vm_output_max_size = 64M
# Dependency preparation before every VM job boots: this shell command (run with /bin/sh -c) runs
# in a Linux sandbox as motor-prep, the workspace read-only at /workspace, network as outbound
# jobs get it when outbound_network is on (else loopback only), and writes what the guest needs
# into $MOTOR_PREP_OUT; that directory goes onto the transfer disk as .motor-prep/. "": none.
vm_prepare_command = ""
# How long the preparation may run (seconds), and the most it may write into $MOTOR_PREP_OUT.
vm_prepare_timeout_s = 600
vm_prepare_max_size = 512M
)motorconf";

}  // namespace

std::string_view default_config_text() { return kDefaultConfigText; }

namespace {

constexpr std::size_t kMaxConfigBytes = 1 << 20;
constexpr std::size_t kMaxSocketPathBytes = 107;  // sizeof(sockaddr_un::sun_path) - 1
constexpr std::size_t kMaxShownValueBytes = 80;

// A value as it appears in an error message: quoted, control characters escaped, long ones cut.
std::string shown(std::string_view value) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char c : value) {
    if (n++ == kMaxShownValueBytes) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// One value lexed from the right-hand side of a line: a scalar, or the items of a list.
struct Value {
  std::string scalar;
  std::vector<std::string> items;
};

// Lexes one item (bare or quoted) starting at `pos`; stops before a ',' when `in_list`, before a
// comment, or at the end. Returns the error message, or nullopt.
std::optional<std::string> lex_item(std::string_view raw, std::size_t& pos, bool in_list,
                                    std::string& out, bool& quoted) {
  while (pos < raw.size() && is_blank(raw[pos])) ++pos;
  quoted = pos < raw.size() && raw[pos] == '"';
  if (quoted) {
    std::size_t open = pos++;
    while (true) {
      if (pos >= raw.size()) return "unterminated quoted string " + shown(raw.substr(open));
      char c = raw[pos++];
      if (c == '"') break;
      if (c == '\\') {
        if (pos < raw.size() && (raw[pos] == '"' || raw[pos] == '\\')) {
          out += raw[pos++];
          continue;
        }
        return "in a quoted string, a backslash must be followed by \" or \\, in " +
               shown(raw.substr(open));
      }
      out += c;
    }
    return std::nullopt;
  }
  std::size_t start = pos;
  while (pos < raw.size()) {
    char c = raw[pos];
    if (in_list && c == ',') break;
    if (c == '#' && (pos == 0 || is_blank(raw[pos - 1]))) break;
    if (c == '"') {
      return "a quote must surround the whole value (or list item), in " + shown(trim(raw));
    }
    ++pos;
  }
  out = std::string(trim(raw.substr(start, pos - start)));
  return std::nullopt;
}

// After an item: blanks, then a comment or the end (or a ',' in a list).
bool at_end(std::string_view raw, std::size_t& pos) {
  while (pos < raw.size() && is_blank(raw[pos])) ++pos;
  return pos >= raw.size() || raw[pos] == '#';
}

std::optional<std::string> lex_scalar(std::string_view raw, Value& value) {
  std::size_t pos = 0;
  bool quoted = false;
  if (auto err = lex_item(raw, pos, false, value.scalar, quoted)) return err;
  if (!at_end(raw, pos)) {
    return "unexpected text after the quoted value: " + shown(trim(raw.substr(pos)));
  }
  return std::nullopt;
}

std::optional<std::string> lex_list(std::string_view raw, Value& value) {
  std::size_t pos = 0;
  if (at_end(raw, pos)) return std::nullopt;  // an empty list
  while (true) {
    std::string item;
    bool quoted = false;
    if (auto err = lex_item(raw, pos, true, item, quoted)) return err;
    if (item.empty() && !quoted) {
      return "empty item in the list " + shown(trim(raw)) + " (items are separated by commas)";
    }
    value.items.push_back(std::move(item));
    while (pos < raw.size() && is_blank(raw[pos])) ++pos;
    if (pos < raw.size() && raw[pos] == ',') {
      ++pos;
      std::size_t probe = pos;
      if (at_end(raw, probe)) return "the list " + shown(trim(raw)) + " ends with a comma";
      continue;
    }
    if (!at_end(raw, pos)) {
      return "expected a comma between list items, got " + shown(trim(raw.substr(pos)));
    }
    return std::nullopt;
  }
}

// --- Value checks: each returns the error message (without origin/line/key) or nullopt. -------

std::optional<std::string> to_whole(std::string_view text, std::string_view what, int64_t min,
                                    int64_t max, int64_t& out) {
  std::string_view digits = text;
  bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "expected " + std::string(what) + ", got " + shown(text);
  }
  if (negative) {
    return "must be at least " + std::to_string(min) + ", got " + std::string(text);
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc{} || ptr != digits.data() + digits.size() || v > max) {
    return "must be at most " + std::to_string(max) + ", got " + std::string(text);
  }
  if (v < min) return "must be at least " + std::to_string(min) + ", got " + std::string(text);
  out = v;
  return std::nullopt;
}

std::string size_name(int64_t bytes) {
  constexpr std::array<std::pair<int64_t, const char*>, 3> kUnits = {
      {{int64_t{1} << 30, "G"}, {int64_t{1} << 20, "M"}, {int64_t{1} << 10, "K"}}};
  for (const auto& [factor, suffix] : kUnits) {
    if (bytes != 0 && bytes % factor == 0) return std::to_string(bytes / factor) + suffix;
  }
  return std::to_string(bytes);
}

std::optional<std::string> to_size(std::string_view text, int64_t min, int64_t max,
                                   int64_t& out) {
  auto size = parse_size(text);
  if (!size) return size.error().message;
  if (*size < min) return "must be at least " + size_name(min) + ", got " + std::string(text);
  if (*size > max) return "must be at most " + size_name(max) + ", got " + std::string(text);
  out = *size;
  return std::nullopt;
}

// Account and group names as useradd/groupadd accept them.
std::optional<std::string> check_account_name(std::string_view name, std::string_view what) {
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
  };
  std::string_view body = name;
  if (!body.empty() && body.back() == '$') body.remove_suffix(1);
  bool ok = !body.empty() && name.size() <= 32 && body.front() != '-' &&
            std::all_of(body.begin(), body.end(), ok_char) &&
            !std::all_of(body.begin(), body.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (ok) return std::nullopt;
  return "expected " + std::string(what) +
         " (letters, digits, '_', '.', '-', at most 32, not starting with '-', not all digits), "
         "got " +
         shown(name);
}

std::optional<std::string> check_absolute_dir(std::string& path, bool allow_empty) {
  if (path.empty() && allow_empty) return std::nullopt;
  if (path.empty() || path.front() != '/') {
    return "expected an absolute path (starting with '/'), got " + shown(path);
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path == "/") return "must not be the root directory itself";
  return std::nullopt;
}

// An absolute path or "" (feature off).
std::optional<std::string> set_optional_absolute(const std::string& value, std::string& out) {
  if (!value.empty() && value.front() != '/') return "expected an absolute path or \"\", got " + shown(value);
  out = value;
  return std::nullopt;
}

struct KeySpec {
  std::string_view name;
  bool list;
  std::optional<std::string> (*apply)(Config&, Value&);
};

constexpr std::string_view kSeconds = "a whole number of seconds";
constexpr std::string_view kWhole = "a whole number";
constexpr int64_t kYear = 365 * 24 * 3600;

const std::array<KeySpec, 64> kKeys = {{
    {"socket_path", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       std::string& p = v.scalar;
       if (p.empty() || p.front() != '/') {
         return "expected an absolute path (starting with '/'), got " + shown(p);
       }
       if (p.back() == '/') return "expected a file path, not a directory, got " + shown(p);
       if (p.size() > kMaxSocketPathBytes) {
         return "a socket path is at most " + std::to_string(kMaxSocketPathBytes) +
                " bytes, got " + std::to_string(p.size());
       }
       c.socket_path = p;
       return std::nullopt;
     }},
    {"socket_group", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_account_name(v.scalar, "a group name")) return err;
       c.socket_group = v.scalar;
       return std::nullopt;
     }},
    {"state_dir", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, false)) return err;
       c.state_dir = v.scalar;
       return std::nullopt;
     }},
    {"workspace_root", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, true)) return err;
       c.workspace_root = v.scalar;
       return std::nullopt;
     }},
    {"allowed_uids", true,
     [](Config& c, Value& v) -> std::optional<std::string> {
       std::vector<uid_t> uids;
       for (const std::string& item : v.items) {
         int64_t uid = 0;
         // (uid_t)-1 means "no uid" to the kernel; never a real one.
         if (auto err = to_whole(item, "a list of numeric uids", 0, int64_t{0xFFFFFFFE}, uid)) {
           return err;
         }
         if (std::find(uids.begin(), uids.end(), static_cast<uid_t>(uid)) != uids.end()) {
           return "uid " + item + " is listed twice";
         }
         uids.push_back(static_cast<uid_t>(uid));
       }
       c.allowed_uids = std::move(uids);
       return std::nullopt;
     }},
    {"allowed_groups", true,
     [](Config& c, Value& v) -> std::optional<std::string> {
       for (std::size_t i = 0; i < v.items.size(); ++i) {
         if (auto err = check_account_name(v.items[i], "a list of group names")) return err;
         if (std::find(v.items.begin(), v.items.begin() + static_cast<std::ptrdiff_t>(i),
                       v.items[i]) != v.items.begin() + static_cast<std::ptrdiff_t>(i)) {
           return "group " + shown(v.items[i]) + " is listed twice";
         }
       }
       c.allowed_groups = std::move(v.items);
       return std::nullopt;
     }},
    {"job_user", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_account_name(v.scalar, "a user name")) return err;
       if (v.scalar == "root") return "jobs never run as root";
       c.job_user = v.scalar;
       return std::nullopt;
     }},
    {"cgroup_parent", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       const std::string& p = v.scalar;
       std::string_view rest = p;
       bool ok = !p.empty() && p.front() != '/' && p.back() != '/';
       while (ok && !rest.empty()) {
         std::size_t slash = rest.find('/');
         std::string_view part = rest.substr(0, slash);
         ok = !part.empty() && part != "." && part != ".." &&
              std::all_of(part.begin(), part.end(), [](char ch) {
                return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
              });
         rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
       }
       if (!ok) {
         return "expected a relative cgroup name such as motor or system.slice/motor (letters, "
                "digits, '_', '.', '-', parts separated by '/', no '.' or '..'), got " +
                shown(p);
       }
       c.cgroup_parent = p;
       return std::nullopt;
     }},
    {"cgroup_mode", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar == "auto") {
         c.cgroup_mode = CgroupMode::kAuto;
       } else if (v.scalar == "v2") {
         c.cgroup_mode = CgroupMode::kV2;
       } else if (v.scalar == "v1") {
         c.cgroup_mode = CgroupMode::kV1;
       } else {
         return "expected auto, v2 or v1, got " + shown(v.scalar);
       }
       return std::nullopt;
     }},
    {"default_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.default_timeout_s); }},
    {"max_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.max_timeout_s); }},
    {"default_cpus", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, "a whole number of CPUs", 1, 4096, c.default_cpus); }},
    {"default_memory", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 50, c.default_memory_bytes);
     }},
    {"max_memory", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 50, c.max_memory_bytes);
     }},
    {"pids_max", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 4194304, c.pids_max); }},
    {"max_running_jobs", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 65536, c.max_running_jobs); }},
    {"max_queued_jobs", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 0, 1000000, c.max_queued_jobs); }},
    {"queue_wait_limit_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 0, kYear, c.queue_wait_limit_s); }},
    {"cpu_oversubscription", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 64, c.cpu_oversubscription); }},
    {"memory_reserve", false,
     [](Config& c, Value& v) { return to_size(v.scalar, 0, int64_t{1} << 50, c.memory_reserve_bytes); }},
    {"disk_free_floor", false,
     [](Config& c, Value& v) { return to_size(v.scalar, 0, int64_t{1} << 50, c.disk_free_floor_bytes); }},
    {"metrics_file", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (!v.scalar.empty() && v.scalar.front() != '/') return "expected an absolute path, got " + shown(v.scalar);
       c.metrics_file = v.scalar;
       return std::nullopt;
     }},
    {"max_argument_size", false,
     [](Config& c, Value& v) {
       // A request travels in one frame of at most 1 MiB.
       return to_size(v.scalar, int64_t{1} << 10, int64_t{1} << 20, c.max_argument_bytes);
     }},
    {"job_log_max_size", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{64} << 10, int64_t{1} << 50, c.job_log_max_bytes);
     }},
    {"init_path", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (!v.scalar.empty() && v.scalar.front() != '/') return "expected an absolute path, got " + shown(v.scalar);
       c.init_path = v.scalar;
       return std::nullopt;
     }},
    {"bb_build_directory", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, true)) return err;
       c.bb_build_directory = v.scalar;
       return std::nullopt;
     }},
    {"cache_paths", true,
     [](Config& c, Value& v) -> std::optional<std::string> {
       std::vector<std::string> paths;
       for (auto& item : v.items) {
         if (item.empty()) continue;
         if (auto err = check_absolute_dir(item, false)) return err;
         paths.push_back(item);
       }
       c.cache_paths = std::move(paths);
       return std::nullopt;
     }},
    {"job_tmp_size", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 40, c.job_tmp_bytes);
     }},
    {"workspace_git_user", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_account_name(v.scalar, "a user name")) return err;
       if (v.scalar == "root") return "git never runs as root over uploaded bundles";
       c.workspace_git_user = v.scalar;
       return std::nullopt;
     }},
    {"max_bundle_size", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 40, c.max_bundle_bytes);
     }},
    {"stalled_client_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.stalled_client_timeout_s); }},
    {"client_buffer_size", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{64} << 10, int64_t{1} << 30, c.client_buffer_bytes);
     }},
    {"client_buffer_total", false,
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 40, c.client_buffer_total_bytes);
     }},
    {"job_log_max_age_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.job_log_max_age_s); }},
    {"finished_jobs_kept", false,
     [](Config& c, Value& v) {
       return to_whole(v.scalar, kWhole, 0, 1000000, c.finished_jobs_kept);
     }},
    {"max_sessions", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 65536, c.max_sessions); }},
    {"max_sessions_per_uid", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 65536, c.max_sessions_per_uid); }},
    {"frame_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 3600, c.frame_timeout_s); }},
    {"session_idle_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.session_idle_timeout_s); }},
    {"direct_jobs", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar == "true") {
         c.direct_jobs = true;
       } else if (v.scalar == "false") {
         c.direct_jobs = false;
       } else {
         return "expected true or false, got " + shown(v.scalar);
       }
       return std::nullopt;
     }},
    {"outbound_network", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar != "true" && v.scalar != "false") return "expected true or false, got " + shown(v.scalar);
       c.outbound_network = v.scalar == "true";
       return std::nullopt;
     }},
    {"outbound_uplink_netns", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       const std::string& n = v.scalar;
       const bool ok = n.empty() || (n.size() <= 64 && n != "." && n != ".." &&
                                     std::all_of(n.begin(), n.end(), [](char ch) {
                                       return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                                              (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
                                     }));
       if (!ok) return "expected a network namespace name (letters, digits, '_', '.', '-', at most 64) or \"\", got " + shown(n);
       c.outbound_uplink_netns = n;
       return std::nullopt;
     }},
    {"outbound_resolvers", true,
     [](Config& c, Value& v) -> std::optional<std::string> {
       std::vector<std::string> out;
       for (const auto& item : v.items) {
         if (item.empty()) continue;
         if (!parse_ipv4(item)) return "expected IPv4 addresses, got " + shown(item);
         out.push_back(item);
       }
       c.outbound_resolvers = std::move(out);
       return std::nullopt;
     }},
    {"outbound_subnet", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       auto cidr = parse_cidr(v.scalar);
       if (!cidr) return cidr.error().message;
       if (cidr->prefix < 8 || cidr->prefix > 29) return "expected a range from /8 to /29, got " + shown(v.scalar);
       c.outbound_subnet = v.scalar;
       return std::nullopt;
     }},
    {"shutdown", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar == "kill") {
         c.shutdown = ShutdownPolicy::kKill;
       } else if (v.scalar == "finish") {
         c.shutdown = ShutdownPolicy::kFinish;
       } else {
         return "expected kill or finish, got " + shown(v.scalar);
       }
       return std::nullopt;
     }},
    {"shutdown_grace_s", false,
     [](Config& c, Value& v) {
       return to_whole(v.scalar, kSeconds, 0, 86400, c.shutdown_grace_s);
     }},
    {"env_allow", true,
     [](Config& c, Value& v) -> std::optional<std::string> {
       for (std::size_t i = 0; i < v.items.size(); ++i) {
         std::string_view name = v.items[i];
         bool prefix = !name.empty() && name.back() == '*';
         if (prefix) name.remove_suffix(1);
         bool ok = !name.empty() && !(name.front() >= '0' && name.front() <= '9') &&
                   std::all_of(name.begin(), name.end(), [](char ch) {
                     return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                            (ch >= '0' && ch <= '9') || ch == '_';
                   });
         if (!ok) {
           return "expected environment variable names (letters, digits, '_', not starting "
                  "with a digit; a trailing '*' makes a prefix), got " +
                  shown(v.items[i]);
         }
         std::string reason = never_forwarded_reason(name);
         if (!reason.empty()) {
           return shown(v.items[i]) + " is never forwarded (" + reason + "); remove it";
         }
         if (std::find(v.items.begin(), v.items.begin() + static_cast<std::ptrdiff_t>(i),
                       v.items[i]) != v.items.begin() + static_cast<std::ptrdiff_t>(i)) {
           return shown(v.items[i]) + " is listed twice";
         }
       }
       c.env_allow = std::move(v.items);
       return std::nullopt;
     }},
    {"vm_image", false, [](Config& c, Value& v) { return set_optional_absolute(v.scalar, c.vm_image); }},
    {"vm_kernel", false, [](Config& c, Value& v) { return set_optional_absolute(v.scalar, c.vm_kernel); }},
    {"vm_initrd", false, [](Config& c, Value& v) { return set_optional_absolute(v.scalar, c.vm_initrd); }},
    {"vm_kernel_cmdline", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       c.vm_kernel_cmdline = v.scalar;
       return std::nullopt;
     }},
    {"libvirt_uri", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar.find("://") == std::string::npos) return "expected a libvirt URI such as qemu:///system, got " + shown(v.scalar);
       c.libvirt_uri = v.scalar;
       return std::nullopt;
     }},
    {"allow_emulation", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar != "true" && v.scalar != "false") return "expected true or false, got " + shown(v.scalar);
       c.allow_emulation = v.scalar == "true";
       return std::nullopt;
     }},
    {"vm_accelerator", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       auto a = vm::parse_accelerator(v.scalar);
       if (!a) return "expected auto, kvm or tcg, got " + shown(v.scalar);
       c.vm_accelerator = *a;
       return std::nullopt;
     }},
    {"vm_dir", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, false)) return err;
       c.vm_dir = v.scalar;
       return std::nullopt;
     }},
    {"vm_data_dir", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, false)) return err;
       c.vm_data_dir = v.scalar;
       return std::nullopt;
     }},
    {"vm_data_disk_size", false,
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{16} << 20, int64_t{1} << 44, c.vm_data_disk_bytes); }},
    {"vm_memory_overhead", false,
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{64} << 20, int64_t{1} << 40, c.vm_memory_overhead_bytes); }},
    {"vm_guest_runner", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar.empty()) return "expected the guest-side runner's path";
       c.vm_guest_runner = v.scalar;
       return std::nullopt;
     }},
    {"vm_agent_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 3600, c.vm_agent_timeout_s); }},
    {"vm_output_max_size", false,
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{64} << 10, int64_t{1} << 40, c.vm_output_max_bytes); }},
    {"vm_prepare_command", false,
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar.size() > 4096) return "a prepare command is at most 4096 bytes";
       c.vm_prepare_command = v.scalar;
       return std::nullopt;
     }},
    {"vm_prepare_timeout_s", false,
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 86400, c.vm_prepare_timeout_s); }},
    {"vm_prepare_max_size", false,
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{1} << 20, int64_t{64} << 30, c.vm_prepare_max_bytes); }},
}};

const KeySpec* find_key(std::string_view name) {
  for (const KeySpec& k : kKeys) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_message(std::string_view key) {
  std::string_view best;
  std::size_t best_distance = 3;  // suggest only close matches
  for (const KeySpec& k : kKeys) {
    std::size_t d = edit_distance(key, k.name);
    if (d < best_distance) {
      best_distance = d;
      best = k.name;
    }
  }
  std::string msg = "unknown key";
  if (!best.empty()) msg += " (did you mean " + std::string(best) + "?)";
  msg += "; the keys are listed in docs/configuration.md";
  return msg;
}

bool valid_key_syntax(std::string_view key) {
  return !key.empty() && key.front() >= 'a' && key.front() <= 'z' &&
         std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
         });
}

}  // namespace

Expected<int64_t> parse_size(std::string_view text) {
  auto size = protocol::parse_size(text);
  if (!size) return Error{"config", size.error().message + ", got " + shown(text)};
  return size;
}

Expected<Config> parse_config(std::string_view text, std::string_view origin) {
  const std::string where =
      (origin.empty() || origin == "config") ? "config" : "config " + std::string(origin);
  auto fail = [&](std::size_t line, std::string_view key, const std::string& msg) {
    std::string m = where + " line " + std::to_string(line) + ": ";
    if (!key.empty()) m += std::string(key) + ": ";
    return Error{"config", m + msg};
  };

  if (text.size() > kMaxConfigBytes) {
    return Error{"config", where + ": larger than " + std::to_string(kMaxConfigBytes) +
                               " bytes; is this really a config file?"};
  }

  Config config;
  std::map<std::string_view, std::size_t> seen;  // key -> line it was set on
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (eol == text.size() && line.empty()) break;

    if (line.find('\0') != std::string_view::npos) {
      return fail(line_no, "", "contains a NUL byte");
    }
    std::string_view body = trim(line);
    if (body.empty() || body.front() == '#') continue;

    std::size_t eq = body.find('=');
    if (eq == std::string_view::npos) {
      return fail(line_no, "", "expected `key = value`, got " + shown(body));
    }
    std::string_view key = trim(body.substr(0, eq));
    std::string_view raw = body.substr(eq + 1);
    if (!valid_key_syntax(key)) {
      return fail(line_no, "",
                  "expected a key name (lower-case letters, digits, '_') before '=', got " +
                      shown(key));
    }
    const KeySpec* spec = find_key(key);
    if (spec == nullptr) return fail(line_no, key, unknown_key_message(key));
    auto [it, inserted] = seen.emplace(spec->name, line_no);
    if (!inserted) {
      return fail(line_no, key,
                  "set twice (first on line " + std::to_string(it->second) +
                      "); keep one of them");
    }

    Value value;
    auto lex_error = spec->list ? lex_list(raw, value) : lex_scalar(raw, value);
    if (lex_error) return fail(line_no, key, *lex_error);
    if (auto err = spec->apply(config, value)) return fail(line_no, key, *err);
  }

  // Checks across keys: reported on the later of the two lines (the one that made it wrong).
  auto line_of = [&](std::string_view key) {
    auto it = seen.find(key);
    return it == seen.end() ? std::size_t{0} : it->second;
  };
  auto cross = [&](std::string_view low_key, std::string_view high_key, const std::string& low,
                   const std::string& high) {
    std::size_t low_line = line_of(low_key);
    std::size_t high_line = line_of(high_key);
    std::string_view key = low_line >= high_line ? low_key : high_key;
    return fail(std::max(low_line, high_line), key,
                std::string(low_key) + " (" + low + ") is more than " + std::string(high_key) +
                    " (" + high + ")");
  };
  if (config.default_timeout_s > config.max_timeout_s) {
    return cross("default_timeout_s", "max_timeout_s", std::to_string(config.default_timeout_s),
                 std::to_string(config.max_timeout_s));
  }
  if (config.default_memory_bytes > config.max_memory_bytes) {
    return cross("default_memory", "max_memory", size_name(config.default_memory_bytes),
                 size_name(config.max_memory_bytes));
  }
  if (config.vm_accelerator == vm::Accelerator::kTcg && !config.allow_emulation) {
    return fail(std::max(line_of("vm_accelerator"), line_of("allow_emulation")), "vm_accelerator",
                "tcg is emulation, which allow_emulation (false) refuses: set allow_emulation = true");
  }
  return config;
}

Expected<Config> load_config_file(const std::string& path) {
  const std::string where = "config " + path;
  auto io_error = [&](const std::string& what, int err) {
    return Error{"config", where + ": " + what + ": " + std::strerror(err)};
  };
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return io_error("cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return Error{"config", where + ": not a regular file"};
  if ((st.st_mode & S_IWOTH) != 0) {
    // Anyone could change who may use the runner: refuse rather than trust it.
    return Error{"config", where + ": writable by everyone; run chmod o-w " + path};
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxConfigBytes) {
    return Error{"config", where + ": larger than " + std::to_string(kMaxConfigBytes) +
                               " bytes; is this really a config file?"};
  }
  std::string text;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read", errno);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      return Error{"config", where + ": larger than " + std::to_string(kMaxConfigBytes) +
                                 " bytes; is this really a config file?"};
    }
  }
  return parse_config(text, path);
}

}  // namespace motor::config
