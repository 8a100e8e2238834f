// The config keys, one entry each: name, section, type, whether SIGHUP may change it, the
// config file's comment, the reference text (docs/configuration.md, motor-runner.conf(5)), the
// parser and the writer. The defaults are Config's member initializers, written out by `show`.
// Adding a key: a Config member and one entry here (config_keys_vm.cpp for VM keys).
#include "config/config_keys.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "config/env_filter.hpp"
#include "base/ipv4.hpp"

namespace motor::config::config_detail {
namespace {

const KeySpec kHostKeys[] = {
    {"socket_path", "Where the runner listens and keeps its state", "path", Reload::kRestart, false,
     "The Unix socket clients connect to (mode 0660). Absolute path, at most 107 bytes.",
     "The Unix socket clients connect to, created with mode 0660. An absolute file path of "
     "at most 107 bytes (the kernel's limit for a socket address).",
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
     },
     [](const Config& c) -> std::string { return show_scalar(c.socket_path); }},
    {"socket_group", "", "text", Reload::kRestart, false,
     "The socket's group: members may connect if allowed_groups also lets them.",
     "The group that owns the socket. A group name (letters, digits, `_`, `.`, `-`; at most "
     "32; not starting with `-`; not all digits).",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_account_name(v.scalar, "a group name")) return err;
       c.socket_group = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.socket_group); }},
    {"state_dir", "", "path", Reload::kRestart, false,
     "The job table (state.db), job logs and (by default) workspaces live here. Absolute path.",
     "Where the job table (`state.db`), the job logs (and, in `ready-logs/`, a few empty ones made ahead for the next jobs) and (by default) workspaces live. An absolute path, "
     "not `/`; a trailing `/` is dropped. One runner per state directory: it locks "
     "`runner.lock` in it, and a second runner on it exits at start.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, false)) return err;
       c.state_dir = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.state_dir); }},
    {"workspace_root", "", "path", Reload::kRestart, false,
     "Per-caller workspaces. Empty: <state_dir>/workspaces. Otherwise an absolute path.",
     "Where per-caller workspaces live. Empty means `<state_dir>/workspaces`; otherwise an "
     "absolute path, not `/`.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, true)) return err;
       c.workspace_root = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.workspace_root); }},
    {"allowed_uids", "", "list", Reload::kRestart, true,
     "Who may talk to the runner (checked with SO_PEERCRED): these uids, and members of "
     "these groups.",
     "Uids allowed to talk to the runner (checked with `SO_PEERCRED`). A list of numeric "
     "uids, 0 to 4294967294, no repeats; may be empty.",
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
     },
     [](const Config& c) -> std::string { return show_uids(c.allowed_uids); }},
    {"allowed_groups", "", "list", Reload::kRestart, true,
     "",
     "Groups whose members are allowed too. A list of group names, no repeats; may be "
     "empty. A peer allowed by neither list gets `unauthorized`.",
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
     },
     [](const Config& c) -> std::string { return show_list(c.allowed_groups); }},
    {"job_user", "Jobs", "text", Reload::kRestart, false,
     "The unprivileged account every job runs as (never root).",
     "The unprivileged account every job runs as. A user name; `root` is refused.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_account_name(v.scalar, "a user name")) return err;
       if (v.scalar == "root") return "jobs never run as root";
       c.job_user = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.job_user); }},
    {"cgroup_parent", "", "text", Reload::kRestart, false,
     "The runner's own cgroup, under the root of each hierarchy; jobs get one cgroup each "
     "below it.",
     "The runner's own cgroup below the root of each hierarchy; each job gets a cgroup "
     "below it. A relative name, parts separated by `/` (e.g. `system.slice/motor`), each "
     "of letters, digits, `_`, `.`, `-`, never `.` or `..`. A clean stop removes it (its "
     "last part) from every hierarchy; after a `kill -9` it stays, and the next start "
     "cleans what is under it. One runner per cgroup parent: it holds a `flock` on the "
     "parent's directory, and a second runner with the same parent exits at start.",
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
     },
     [](const Config& c) -> std::string { return show_scalar(c.cgroup_parent); }},
    {"cgroup_mode", "", "word", Reload::kRestart, false,
     "Which cgroup hierarchy to use: auto (v2 when mounted, otherwise v1), v2 or v1.",
     "Which cgroup hierarchy to use: `auto` (the runner detects which one is in use and "
     "logs it), or `v2` / `v1` to insist on one.",
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
     },
     [](const Config& c) -> std::string { return c.cgroup_mode == CgroupMode::kAuto ? "auto" : c.cgroup_mode == CgroupMode::kV2 ? "v2" : "v1"; }},
    {"job_backend", "", "word", Reload::kRestart, false,
     "How Linux jobs run: direct (the runner's own cgroups), systemd (a transient unit each) or auto.",
     "How Linux jobs run. `direct`: in cgroups the runner makes below `cgroup_parent`. `systemd`: "
     "each job a transient service `motor-job-<instance>-<id>.service` (the instance: a hash of "
     "`state_dir`) in `motor-jobs.slice`, started over "
     "the system bus, with Motor's sandbox applied inside it (docs/job-isolation.md, \"The systemd "
     "backend\"); a runner that cannot reach systemd's bus at start exits with a config error. "
     "`auto`: `systemd` when systemd is PID 1 and its bus answers, else `direct` (the runner logs "
     "which). Outbound jobs and VM jobs keep the direct path.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar == "auto") {
         c.job_backend = JobBackend::kAuto;
       } else if (v.scalar == "direct") {
         c.job_backend = JobBackend::kDirect;
       } else if (v.scalar == "systemd") {
         c.job_backend = JobBackend::kSystemd;
       } else {
         return "expected auto, direct or systemd, got " + shown(v.scalar);
       }
       return std::nullopt;
     },
     [](const Config& c) -> std::string {
       return c.job_backend == JobBackend::kAuto ? "auto" : c.job_backend == JobBackend::kDirect ? "direct" : "systemd";
     }},
    {"default_timeout_s", "", "seconds", Reload::kLive, false,
     "Timeout of a job that asks for none, and the longest a job may ask for (seconds).",
     "Timeout in seconds for a job that asks for none; counted from `started`. 1 to "
     "31536000, and at most `max_timeout_s`.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.default_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.default_timeout_s); }},
    {"max_timeout_s", "", "seconds", Reload::kLive, false,
     "",
     "The longest timeout a job may ask for, in seconds. 1 to 31536000.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.max_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.max_timeout_s); }},
    {"default_cpus", "", "number", Reload::kLive, false,
     "CPUs (whole cores) of a job that asks for none.",
     "CPUs (whole cores, claimed from the free set) for a job that asks for none. 1 to 4096.",
     [](Config& c, Value& v) { return to_whole(v.scalar, "a whole number of CPUs", 1, 4096, c.default_cpus); },
     [](const Config& c) -> std::string { return std::to_string(c.default_cpus); }},
    {"default_memory", "", "size", Reload::kLive, false,
     "Memory of a job that asks for none, and the most a job may ask for.",
     "Memory limit of a job that asks for none. A size, 1M to 2^50 bytes (1 PiB), at most "
     "`max_memory`.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 50, c.default_memory_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.default_memory_bytes); }},
    {"max_memory", "", "size", Reload::kLive, false,
     "",
     "The most memory a job may ask for. A size, 1M to 2^50 bytes.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 50, c.max_memory_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.max_memory_bytes); }},
    {"pids_max", "", "number", Reload::kLive, false,
     "Most processes and threads in one job.",
     "Most processes and threads in one job (the cgroup's pids limit). 1 to 4194304.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 4194304, c.pids_max); },
     [](const Config& c) -> std::string { return std::to_string(c.pids_max); }},
    {"max_running_jobs", "", "number", Reload::kRestart, false,
     "Most jobs running at once; more wait in the queue.",
     "Most jobs running at once; more wait in the queue. 1 to 65536.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 65536, c.max_running_jobs); },
     [](const Config& c) -> std::string { return std::to_string(c.max_running_jobs); }},
    {"sandbox_pool_size", "", "number", Reload::kLive, false,
     "Linux job sandboxes built ahead and kept waiting, so that a job starts without building one.",
     "Linux job sandboxes built ahead, each exactly as a default job's with an empty mount point "
     "for its workspace, waiting with motor-init at its command gate. A job whose sandbox would be "
     "the same but for its workspace takes one (its workspace is then mounted in and its cgroup "
     "adopts it), which takes most of the sandbox's set-up out of the job's start; each serves one "
     "job. Jobs that need another sandbox (outbound network, sibling workspaces) build their own. "
     "0 turns it off. 0 to 16.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 0, 16, c.sandbox_pool_size); },
     [](const Config& c) -> std::string { return std::to_string(c.sandbox_pool_size); }},
    {"max_queued_jobs", "", "number", Reload::kRestart, false,
     "Jobs that cannot start yet wait in a queue (FIFO per priority class): at most this "
     "many.",
     "Most jobs waiting in the admission queue; beyond it new jobs are refused with "
     "`runner_full` (and `retry_after_ms`). 0 to 1000000.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 0, 1000000, c.max_queued_jobs); },
     [](const Config& c) -> std::string { return std::to_string(c.max_queued_jobs); }},
    {"queue_wait_limit_s", "", "seconds", Reload::kLive, false,
     "Longest a job waits in the queue before it is refused (queue_wait_exceeded); a "
     "request may ask for less.",
     "Longest a job waits in the queue before it is refused with `queue_wait_exceeded`; a "
     "request's `queue_wait_limit_s` may ask for less. 0 to a year.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 0, kYear, c.queue_wait_limit_s); },
     [](const Config& c) -> std::string { return std::to_string(c.queue_wait_limit_s); }},
    {"cpu_oversubscription", "", "number", Reload::kRestart, false,
     "Claims per CPU core: 1 never shares a core; 2 lets two jobs share one when every core "
     "is claimed.",
     "Claims allowed per CPU core. `1`: a core is never shared and jobs wait for free "
     "cores; `2`: when every core is claimed, two jobs may share one (least-loaded first), "
     "and the job's `accepted`/status says so. 1 to 64.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 64, c.cpu_oversubscription); },
     [](const Config& c) -> std::string { return std::to_string(c.cpu_oversubscription); }},
    {"memory_reserve", "", "size", Reload::kRestart, false,
     "Job memory caps are reserved against the host's memory minus this reserve.",
     "Job memory caps are reserved against the host's memory (`MemTotal`) minus this; a job "
     "whose cap does not fit waits. A size.",
     [](Config& c, Value& v) { return to_size(v.scalar, 0, int64_t{1} << 50, c.memory_reserve_bytes); },
     [](const Config& c) -> std::string { return size_name(c.memory_reserve_bytes); }},
    {"disk_free_floor", "", "size", Reload::kRestart, false,
     "Below this much free space on the workspace filesystem, new jobs are refused "
     "(runner_disk_full).",
     "Below this much free space on the workspace filesystem, new jobs are refused with "
     "`runner_disk_full` and `retry_after_ms`; running jobs are not touched. Independently, "
     "a new job is refused while the state directory's filesystem has less than twice the "
     "size of the last change saved to the job table (`state.db`) plus 1 MiB free (plus "
     "this floor when the two are one filesystem). A size.",
     [](Config& c, Value& v) { return to_size(v.scalar, 0, int64_t{1} << 50, c.disk_free_floor_bytes); },
     [](const Config& c) -> std::string { return size_name(c.disk_free_floor_bytes); }},
    {"metrics_file", "", "path", Reload::kRestart, false,
     "Metrics in Prometheus text format, rewritten atomically for node_exporter's textfile "
     "collector (\"\" = off).",
     "Where to write Prometheus text metrics (atomically, for node_exporter's textfile "
     "collector). Empty: not written (they are still available with `motor status "
     "--metrics`). Absolute path.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (!v.scalar.empty() && v.scalar.front() != '/') return "expected an absolute path, got " + shown(v.scalar);
       c.metrics_file = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.metrics_file); }},
    {"max_argument_size", "", "size", Reload::kLive, false,
     "Most bytes of command, argv and environment in one request.",
     "Most bytes of command, argv and environment in one request. A size, 1K to 1M (a "
     "request travels in one frame of at most 1 MiB).",
     [](Config& c, Value& v) {
       // A request travels in one frame of at most 1 MiB.
       return to_size(v.scalar, int64_t{1} << 10, int64_t{1} << 20, c.max_argument_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.max_argument_bytes); }},
    {"init_path", "", "path", Reload::kRestart, false,
     "motor-init, PID 1 of every job's sandbox. Empty: the motor-init beside motor-runner.",
     "Host path of `motor-init`, PID 1 of every job's sandbox (bound read-only at "
     "`/.motor/motor-init`). Empty means the `motor-init` beside the `motor-runner` "
     "executable.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (!v.scalar.empty() && v.scalar.front() != '/') return "expected an absolute path, got " + shown(v.scalar);
       c.init_path = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.init_path); }},
    {"cache_paths", "", "list", Reload::kRestart, true,
     "Shared caches every job sees read-only at the same path (Cargo registry, git sources, "
     "compile\ncache). Absolute paths that exist; \"\" for none.",
     "Shared caches (the Cargo registry, git sources, the compile cache) that every job "
     "sees **read-only** at the same path, `nosuid,nodev`. A list of absolute paths that "
     "must exist when the runner starts.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       std::vector<std::string> paths;
       for (auto& item : v.items) {
         if (item.empty()) continue;
         if (auto err = check_absolute_dir(item, false)) return err;
         struct stat st {};
         if (::stat(item.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
           return shown(item) + " is not a directory; create it or remove it from the config";
         }
         paths.push_back(item);
       }
       c.cache_paths = std::move(paths);
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_list(c.cache_paths); }},
    {"cache_fill_command", "", "text", Reload::kRestart, false,
     "The build a verified default-branch tip runs as motor-cache to fill the caches\n"
     "(docs/compile-cache.md); cache_fill_network gives it the outbound network.",
     "The build command of a compile-cache fill (docs/compile-cache.md): run by `/bin/sh -c` as "
     "`motor-cache` in the repository's checkout of a verified default-branch tip, with the "
     "shared caches writable and `CARGO_TARGET_DIR` the fill's target, which is published as "
     "the repository's warm target when it exits 0. Empty turns fills off.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       c.cache_fill_command = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.cache_fill_command); }},
    {"cache_fill_network", "", "boolean", Reload::kRestart, false,
     "",
     "Whether a compile-cache fill gets the outbound network (public IPv4 only, the jobs' "
     "policy; needs `outbound_network = true`). `true` or `false`.",
     [](Config& c, Value& v) { return to_bool(v.scalar, c.cache_fill_network); },
     [](const Config& c) -> std::string { return c.cache_fill_network ? "true" : "false"; }},
    {"warm_spares", "", "boolean", Reload::kRestart, false,
     "",
     "Whether the runner keeps a spare copy of each repository's published warm target, made "
     "while no job runs or waits, which the next new workspace takes whole instead of copying "
     "the target on its prepare's path (docs/compile-cache.md, \"Spares made ahead\"). It "
     "takes as much disk as the target, under the workspace root. `true` or `false`.",
     [](Config& c, Value& v) { return to_bool(v.scalar, c.warm_spares); },
     [](const Config& c) -> std::string { return c.warm_spares ? "true" : "false"; }},
    {"cache_max_size", "", "size", Reload::kRestart, false,
     "Fills' workspaces and warm targets together: past this the least recently used go\n"
     "(never a repository's newest target, nor what a fill or job uses). 0 = no limit.",
     "The most bytes the compile-cache fills' workspaces and published warm targets may take "
     "together (`<state_dir>/cache`; the shared `cache_paths` are not counted: their own tools "
     "bound them). Past it the least recently used go first, never a repository's newest warm "
     "target nor anything a running fill or job uses (docs/compile-cache.md). A size, 0 (no "
     "limit) to 2^50 bytes.",
     [](Config& c, Value& v) { return to_size(v.scalar, 0, int64_t{1} << 50, c.cache_max_bytes); },
     [](const Config& c) -> std::string { return size_name(c.cache_max_bytes); }},
    {"cache_max_age_s", "", "seconds", Reload::kRestart, false,
     "A repository's fill workspace and warm target unused this long are removed. 0 = kept.",
     "A repository whose fill workspace and warm target nothing used (a fill, a workspace "
     "starting from it) for this many seconds loses both, its newest target too; `exec.status` "
     "then shows it as never built. 0 (kept) to a year.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 0, kYear, c.cache_max_age_s); },
     [](const Config& c) -> std::string { return std::to_string(c.cache_max_age_s); }},
    {"cache_sweep_interval_s", "", "seconds", Reload::kRestart, false,
     "",
     "How often the compile cache is measured (a `du` child, off the loop) and "
     "`cache_max_size` and `cache_max_age_s` applied; also after each fill and on "
     "`motor cache status`. 1 to a day.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 24 * 3600, c.cache_sweep_interval_s); },
     [](const Config& c) -> std::string { return std::to_string(c.cache_sweep_interval_s); }},
    {"bb_build_directory", "", "path", Reload::kRestart, false,
     "Buildbarn's build directory (docs/buildbarn.md): root and the runner's account (motor-bb-runner)\n"
     "may run a job on an input root below it (exec.run's host_workspace). \"\" = off.",
     "Buildbarn's build directory on a worker host (docs/buildbarn.md): root and the runner's own "
     "account (`motor-bb-runner`) may run a job on an input root below it (`exec.run`'s "
     "`host_workspace`). An absolute path; empty turns it off.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, true)) return err;
       c.bb_build_directory = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.bb_build_directory); }},
    {"job_tmp_size", "", "size", Reload::kRestart, false,
     "Size cap of each job's private /tmp (a tmpfs).",
     "Size cap of each job's private `/tmp` (a tmpfs, `nosuid,nodev`). A size, 1M to 1T.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 40, c.job_tmp_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.job_tmp_bytes); }},
    {"workspace_git_user", "", "text", Reload::kRestart, false,
     "Workspaces: the account that owns the Git mirrors and parses uploaded bundles (never "
     "root),\nand the largest bundle one workspace.prepare may send.",
     "The account that owns the per-repository Git mirrors and runs the `git fetch` that "
     "parses an uploaded bundle (docs/workspaces.md). A user name; `root` is refused.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_account_name(v.scalar, "a user name")) return err;
       if (v.scalar == "root") return "git never runs as root over uploaded bundles";
       c.workspace_git_user = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.workspace_git_user); }},
    {"max_bundle_size", "", "size", Reload::kRestart, false,
     "",
     "The largest bundle one `workspace.prepare` may upload; a bigger one is refused with "
     "`bundle_rejected` naming this limit, and the workspace is left as it was. A size, 1M "
     "to 1T.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 40, c.max_bundle_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.max_bundle_bytes); }},
    {"job_log_max_size", "Output and history", "size", Reload::kRestart, false,
     "Output kept on disk per job (for replay); older output is dropped beyond this.",
     "Output kept on disk per job for replay (`exec.attach`); beyond it, older output is "
     "dropped and replays say `truncated_before_seq`. A size, 64K to 2^50 bytes.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{64} << 10, int64_t{1} << 50, c.job_log_max_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.job_log_max_bytes); }},
    {"client_buffer_size", "", "size", Reload::kRestart, false,
     "Output in flight per client; a client that reads slower than this waits "
     "(backpressure).",
     "Output in flight to one client, the backpressure bound: a client that reads slower "
     "than the job writes is held back, and runner memory per client never grows past it. A "
     "size, 64K to 1G.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{64} << 10, int64_t{1} << 30, c.client_buffer_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.client_buffer_bytes); }},
    {"client_buffer_total", "", "size", Reload::kRestart, false,
     "Output in flight to all clients together; past it, the clients that read nothing are "
     "cut off\n(they reattach from their last seq; nothing is lost).",
     "Output in flight to all clients together. Past it, no client gets more stream records "
     "until the total falls (replies to requests may go an eighth of it, at least 1 MiB, "
     "further, so that `motor status` still answers), and the clients that hold a full buffer of their "
     "own and have read nothing of it for `stalled_client_timeout_s` are cut off; what they "
     "had not read stays in the jobs' histories, and `motor` reattaches from its last `seq` "
     "by itself. Followers are fed at most 4 MiB per loop iteration, all jobs together (a "
     "fan-out to a thousand followers is spread over iterations). A client that sends "
     "requests and reads none of its replies is not read from while its own buffer is full. "
     "A size, 1M to 1T.",
     [](Config& c, Value& v) {
       return to_size(v.scalar, int64_t{1} << 20, int64_t{1} << 40, c.client_buffer_total_bytes);
     },
     [](const Config& c) -> std::string { return size_name(c.client_buffer_total_bytes); }},
    {"stalled_client_timeout_s", "", "seconds", Reload::kLive, false,
     "A client that reads nothing for this long while its job has more for it is dropped "
     "from the\njob's stream with a \"stalled\" error naming where to reattach (its output "
     "stays in the history).",
     "A client following a job that reads nothing for this long while the job has more "
     "output for it is dropped from that job's stream with an error `{\"code\":\"stalled\"}` "
     "naming the `seq` to reattach from (`exec.attach`); the output stays in the job's "
     "history, the job and other clients are never slowed. 1 to a year.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.stalled_client_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.stalled_client_timeout_s); }},
    {"finished_jobs_kept", "", "number", Reload::kLive, false,
     "Finished jobs whose records and logs are kept.",
     "Finished jobs whose records and logs are kept. 0 to 1000000.",
     [](Config& c, Value& v) {
       return to_whole(v.scalar, kWhole, 0, 1000000, c.finished_jobs_kept);
     },
     [](const Config& c) -> std::string { return std::to_string(c.finished_jobs_kept); }},
    {"job_log_max_age_s", "", "seconds", Reload::kRestart, false,
     "Seconds a finished job's output history is kept; after that an attach answers "
     "history_expired.",
     "Seconds after a job finished that its output history is deleted; the job's record "
     "stays (until `finished_jobs_kept` pushes it out) and an attach then answers "
     "`history_expired`. 1 to a year.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.job_log_max_age_s); },
     [](const Config& c) -> std::string { return std::to_string(c.job_log_max_age_s); }},
    {"max_sessions", "Sessions and shutdown", "number", Reload::kRestart, false,
     "Most client connections at once, and of one account (uid, or caller named by the SSH "
     "bridge);\nthe operator (root) and the runner's own account are not counted per account.",
     "Most client connections at once. 1 to 65536.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 65536, c.max_sessions); },
     [](const Config& c) -> std::string { return std::to_string(c.max_sessions); }},
    {"max_sessions_per_uid", "", "number", Reload::kRestart, false,
     "",
     "Most client connections of one account (by the peer's uid), so that one account "
     "cannot take every session; a caller named by the SSH bridge (`runner.identify`) is "
     "counted by its name. Sessions of root and of the runner's own account (the bridge "
     "before it names its caller) are not counted per account. A connection over the cap is "
     "refused with `{\"code\":\"runner_full\"}` (no request id) and closed; `motor` exits 75. 1 "
     "to 65536.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kWhole, 1, 65536, c.max_sessions_per_uid); },
     [](const Config& c) -> std::string { return std::to_string(c.max_sessions_per_uid); }},
    {"frame_timeout_s", "", "seconds", Reload::kRestart, false,
     "A connection that begins a frame and does not finish it within this many seconds is "
     "closed.",
     "A connection that begins a frame (even only its 4-byte header) and does not finish it "
     "within this many seconds gets `{\"code\":\"session_timeout\"}` and is closed. 1 to 3600.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 3600, c.frame_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.frame_timeout_s); }},
    {"session_idle_timeout_s", "", "seconds", Reload::kRestart, false,
     "A connection that sends nothing and waits for nothing (no job followed, no reply "
     "owed) this long is closed.",
     "A connection that has sent nothing for this long and waits for nothing (it follows no "
     "job, is owed no reply such as a drain or an `accepted`, has nothing in flight and no "
     "frame begun) gets `{\"code\":\"session_timeout\"}` and is closed. 1 to a year.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, kYear, c.session_idle_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.session_idle_timeout_s); }},
    {"direct_jobs", "", "boolean", Reload::kLive, false,
     "Direct jobs: exec.run with direct: true gets a one-time secret that lets its holder "
     "attach,\ncheck status or cancel that job only (docs/direct-runs.md). true or false.",
     "Whether `exec.run` may ask for a direct job (`direct: true`): the runner then returns "
     "a one-time secret, only in that job's `accepted` record, that lets its holder attach "
     "to, check or cancel that one job. See `docs/direct-runs.md`. `true` or `false`.",
     [](Config& c, Value& v) { return to_bool(v.scalar, c.direct_jobs); },
     [](const Config& c) -> std::string { return c.direct_jobs ? "true" : "false"; }},
    {"shutdown", "", "word", Reload::kRestart, false,
     "On SIGTERM: kill running jobs, or finish (let them run up to shutdown_grace_s, then "
     "kill).",
     "What SIGTERM does to running jobs: `kill` them (each recorded as killed), or "
     "`finish`: stop accepting and let them run up to `shutdown_grace_s`, then kill what is "
     "left.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar == "kill") {
         c.shutdown = ShutdownPolicy::kKill;
       } else if (v.scalar == "finish") {
         c.shutdown = ShutdownPolicy::kFinish;
       } else {
         return "expected kill or finish, got " + shown(v.scalar);
       }
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return c.shutdown == ShutdownPolicy::kKill ? "kill" : "finish"; }},
    {"shutdown_grace_s", "", "seconds", Reload::kRestart, false,
     "",
     "Seconds running jobs get to finish when `shutdown = finish`. 0 to 86400. Keep the "
     "unit's `TimeoutStopSec` above it.",
     [](Config& c, Value& v) {
       return to_whole(v.scalar, kSeconds, 0, 86400, c.shutdown_grace_s);
     },
     [](const Config& c) -> std::string { return std::to_string(c.shutdown_grace_s); }},
    {"log_level", "Logging", "word", Reload::kLive, false,
     "Least severe messages logged: error, warning, info or debug.",
     "Least severe messages the runner logs (to the journal under systemd, otherwise stderr): "
     "`error`, `warning`, `info` (each job's start and end) or `debug`.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       auto level = parse_log_level(v.scalar);
       if (!level) return "expected error, warning, info or debug, got " + shown(v.scalar);
       c.log_level = *level;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return log_level_name(c.log_level); }},
    {"outbound_network", "Outbound network", "boolean", Reload::kRestart, false,
     "Whether a job may ask for network: \"outbound\" (public IPv4 only; "
     "docs/job-isolation.md).\nfalse refuses such jobs with network_unsupported. true or "
     "false.",
     "Whether a job may ask for `network: \"outbound\"` (public IPv4 only; "
     "docs/job-isolation.md). `false` refuses such jobs with `network_unsupported`. `true` "
     "builds the egress namespace at start; start fails if it cannot. `true` or `false`.",
     [](Config& c, Value& v) { return to_bool(v.scalar, c.outbound_network); },
     [](const Config& c) -> std::string { return c.outbound_network ? "true" : "false"; }},
    {"outbound_uplink_netns", "", "text", Reload::kRestart, false,
     "The network namespace whose routes reach the internet, by name (/run/netns/NAME); \"\" "
     "is the\nrunner's own (the host's).",
     "The network namespace whose routes reach the internet, by its name under "
     "`/run/netns`. Empty: the runner's own (the host's). The runner adds a veth "
     "`meg-<tag>`, turns `ip_forward` on and adds a masquerade table `motor_eg_<tag>` "
     "there. Letters, digits, `_`, `.`, `-`, at most 64.",
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
     },
     [](const Config& c) -> std::string { return show_scalar(c.outbound_uplink_netns); }},
    {"outbound_resolvers", "", "list", Reload::kRestart, true,
     "Resolvers the jobs' filtering resolver forwards to (IPv4). \"\": the nameservers in "
     "/etc/resolv.conf.",
     "Upstream DNS servers the jobs' filtering resolver forwards to, tried in order (asked "
     "from the uplink namespace). A list of IPv4 addresses. Empty: the IPv4 `nameserver`s "
     "of `/etc/resolv.conf`; none there is a start error.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       std::vector<std::string> out;
       for (const auto& item : v.items) {
         if (item.empty()) continue;
         if (!parse_ipv4(item)) return "expected IPv4 addresses, got " + shown(item);
         out.push_back(item);
       }
       c.outbound_resolvers = std::move(out);
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_list(c.outbound_resolvers); }},
    {"outbound_subnet", "", "text", Reload::kRestart, false,
     "Addresses of the jobs' links (a /30 each) and the egress namespace. Pick one the "
     "uplink does not use.",
     "Addresses of the egress links: the uplink link is the first /30, each running "
     "outbound job gets the next free /30. A range from /8 to /29 with no host bits set; "
     "pick one the uplink does not use.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       auto cidr = parse_cidr(v.scalar);
       if (!cidr) return cidr.error().message;
       if (cidr->prefix < 8 || cidr->prefix > 29) return "expected a range from /8 to /29, got " + shown(v.scalar);
       c.outbound_subnet = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.outbound_subnet); }},
    {"env_allow", "Environment", "list", Reload::kLive, true,
     "Caller environment variables forwarded to jobs, besides RUST_*, CARGO_*, NEXTEST_*, "
     "LC_*,\nRUSTFLAGS and RUSTDOCFLAGS. An entry ending in * is a prefix. Names containing "
     "TOKEN, SECRET,\nPASSWORD, KEY or CREDENTIAL, SSH_AUTH_SOCK, PATH, HOME, USER and "
     "LOGNAME are never forwarded.",
     "Caller environment variables forwarded to a job besides the built-in ones. A list of "
     "names (letters, digits, `_`, not starting with a digit); an entry ending in `*` is a "
     "prefix (`MY_BUILD_*`). Names that could never be forwarded (below) are errors, and so "
     "are repeats.",
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
     },
     [](const Config& c) -> std::string { return show_list(c.env_allow); }},
};

}  // namespace

std::span<const KeySpec> config_keys() {
  static const std::vector<KeySpec> all = [] {
    std::vector<KeySpec> keys(std::begin(kHostKeys), std::end(kHostKeys));
    for (const KeySpec& k : vm_config_keys()) keys.push_back(k);
    return keys;
  }();
  return all;
}

const KeySpec* find_config_key(std::string_view name) {
  for (const KeySpec& k : config_keys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

}  // namespace motor::config::config_detail
