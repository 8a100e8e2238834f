// The runner's configuration: every key has a default (the embedded default config), and a
// config file overrides keys one per line. Format and keys: docs/configuration.md.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "base/log_level.hpp"
#include "netpolicy/outbound_settings.hpp"
#include "vm/accelerator.hpp"

namespace motor::config {

enum class ShutdownPolicy { kKill, kFinish };
enum class CgroupMode { kAuto, kV2, kV1 };
// How Linux jobs run: in the runner's own cgroups (direct) or as transient systemd units.
enum class JobBackend { kAuto, kDirect, kSystemd };

struct Config {
  // Where the runner listens and keeps its state.
  std::string socket_path = "/run/motor/motor.sock";
  std::string state_dir = "/var/lib/motor";
  // Per-caller workspaces live under here (default: <state_dir>/workspaces when empty).
  std::string workspace_root;
  std::string socket_group = "motor";   // socket is mode 0660, this group
  std::vector<uid_t> allowed_uids = {0};
  std::vector<std::string> allowed_groups = {"motor"};

  // Jobs.
  std::string job_user = "motor-job";
  std::string cgroup_parent = "motor";  // our own parent cgroup under each hierarchy
  CgroupMode cgroup_mode = CgroupMode::kAuto;
  // direct until the gate has passed under the systemd backend (docs/job-isolation.md).
  JobBackend job_backend = JobBackend::kDirect;
  int64_t default_timeout_s = 600;
  int64_t max_timeout_s = 86400;
  int64_t default_cpus = 1;
  int64_t default_memory_bytes = int64_t{2} << 30;
  int64_t max_memory_bytes = int64_t{16} << 30;
  int64_t pids_max = 4096;
  int64_t max_running_jobs = 64;
  int64_t sandbox_pool_size = 1;  // Linux job sandboxes built ahead (runner/sandbox_pool.hpp)
  // Admission: jobs that cannot start wait in the queue (at most max_queued_jobs, each at most
  // queue_wait_limit_s unless the request asks for less).
  int64_t max_queued_jobs = 256;
  int64_t queue_wait_limit_s = 3600;
  // Claims per core (1: a core is never shared; 2: two jobs may share one when all are claimed).
  int64_t cpu_oversubscription = 1;
  // Job memory caps are reserved against the host's memory minus this.
  int64_t memory_reserve_bytes = int64_t{1} << 30;
  // Below this much free space on the workspace filesystem, new jobs are refused.
  int64_t disk_free_floor_bytes = int64_t{1} << 30;
  // Prometheus text exposition for node_exporter's textfile collector ("" = none).
  std::string metrics_file;
  int64_t max_argument_bytes = 256 * 1024;   // command/argv/env total per request
  // The job sandbox: motor-init's path (empty: beside the motor-runner executable) and the
  // size cap of each job's private /tmp.
  std::string init_path;
  // Shared caches (Cargo registry, git sources, compile cache): host paths every job sees
  // read-only at the same path.
  std::vector<std::string> cache_paths;
  // Compile-cache fills (docs/compile-cache.md): the build a verified default-branch tip runs as
  // motor-cache with the caches writable, and whether it gets the outbound network.
  std::string cache_fill_command = "cargo test --workspace --no-run";
  bool cache_fill_network = false;
  // A copy of each published warm target made ahead while the host is quiet, which the next new
  // workspace takes whole (docs/compile-cache.md "Spares made ahead").
  bool warm_spares = true;
  // Eviction of the fills' workspaces and published warm targets (docs/compile-cache.md,
  // "Eviction, status and clear"): the size they may take together, how long an unused one is
  // kept (0 = no limit, each), and how often they are measured and the limits applied.
  int64_t cache_max_bytes = int64_t{50} << 30;
  int64_t cache_max_age_s = 14 * 24 * 3600;
  int64_t cache_sweep_interval_s = 600;
  // Buildbarn's build directory: host_workspace paths resolve beneath it ("" = off).
  std::string bb_build_directory;
  int64_t job_tmp_bytes = int64_t{1} << 30;
  // Workspaces: the account owning the Git mirrors (parses bundles), the bundle size limit.
  std::string workspace_git_user = "motor-cache";
  int64_t max_bundle_bytes = int64_t{1} << 30;

  // Output history kept per job on disk, and per client in flight (backpressure bound).
  int64_t job_log_max_bytes = int64_t{1} << 30;
  int64_t client_buffer_bytes = 1 << 20;
  // All clients together: past this, stream records pause and the clients that read nothing
  // are cut off (they reattach from their last seq).
  int64_t client_buffer_total_bytes = int64_t{256} << 20;
  // A follower that has read nothing for this long while its job has more for it is dropped
  // with a `stalled` error naming the seq to reattach from (its data stays in the history).
  int64_t stalled_client_timeout_s = 60;
  int64_t finished_jobs_kept = 1000;
  // A finished job's output history is deleted this long after the job ended (its record stays
  // until finished_jobs_kept pushes it out; an attach then answers history_expired).
  int64_t job_log_max_age_s = 7 * 86400;

  // Sessions: at most max_sessions, of which one account (or bridged caller) holds at most
  // max_sessions_per_uid; a frame begun must be finished within frame_timeout_s, and a session
  // that waits for nothing and sends nothing is closed after session_idle_timeout_s.
  int64_t max_sessions = 1024;
  int64_t max_sessions_per_uid = 256;
  int64_t frame_timeout_s = 30;
  int64_t session_idle_timeout_s = 900;

  // Direct jobs (exec.run with direct: true) and their one-time secrets (docs/direct-runs.md).
  bool direct_jobs = false;

  // Outbound network for jobs that ask for it (issue 9, docs/job-isolation.md): off unless the
  // operator enables it. The uplink is a named network namespace (/run/netns/NAME) or, empty,
  // the runner's own; resolvers empty means the IPv4 nameservers of /etc/resolv.conf; every
  // job gets a /30 of outbound_subnet.
  bool outbound_network = false;
  std::string outbound_uplink_netns;
  std::vector<std::string> outbound_resolvers;
  std::string outbound_subnet = "100.88.0.0/16";

  // SIGTERM: kill running jobs, or wait up to shutdown_grace_s for them to finish first.
  ShutdownPolicy shutdown = ShutdownPolicy::kKill;
  int64_t shutdown_grace_s = 30;

  // Least severe messages logged.
  LogLevel log_level = LogLevel::kInfo;

  // Environment names forwarded from the caller besides RUST_*, CARGO_*, NEXTEST_*, LC_*,
  // RUSTFLAGS, RUSTDOCFLAGS (runner/env_filter.hpp). An entry ending in '*' is a prefix.
  std::vector<std::string> env_allow = {"CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
                                        "MAKEFLAGS", "LANG", "LC_ALL", "TZ", "TERM", "NO_COLOR",
                                        "PKG_CONFIG_PATH", "GOFLAGS", "PYTHONDONTWRITEBYTECODE"};

  // Windows jobs: VMs through libvirt (docs/windows-jobs.md). Off while vm_image is empty.
  std::string vm_image;
  std::string vm_kernel, vm_initrd, vm_kernel_cmdline;
  std::string libvirt_uri = "qemu:///system";
  bool allow_emulation = false;
  // auto: KVM when the probe as motor-qemu says it works, else TCG if allow_emulation.
  vm::Accelerator vm_accelerator = vm::Accelerator::kAuto;
  std::string vm_dir = "/var/lib/motor/vm";
  std::string vm_data_dir = "/var/lib/motor/vm-data";
  int64_t vm_data_disk_bytes = int64_t{8} << 30;
  int64_t vm_memory_overhead_bytes = int64_t{512} << 20;
  std::string vm_guest_runner = "/motor/run";
  int64_t vm_agent_timeout_s = 300;
  int64_t vm_output_max_bytes = int64_t{64} << 20;
  // Dependency preparation before a VM boots (docs/windows-jobs.md): a shell command, "" = none.
  std::string vm_prepare_command;
  int64_t vm_prepare_timeout_s = 600;
  int64_t vm_prepare_max_bytes = int64_t{512} << 20;

  std::string effective_workspace_root() const {
    return workspace_root.empty() ? state_dir + "/workspaces" : workspace_root;
  }

  bool operator==(const Config&) const = default;
};

// Where `serve`, `gate` and `check-config` look without --config; when it is absent the
// embedded defaults apply.
inline constexpr std::string_view kDefaultConfigPath = "/etc/motor/motor-runner.conf";

// The embedded default config as text, exactly what a config file with every key at its default
// would say (also shipped as conf/motor-runner.conf). Generated from the key table
// (config_keys.cpp), like the two texts below.
std::string_view default_config_text();
// The "## Keys" part of docs/configuration.md (Markdown tables, one per section).
std::string config_reference_markdown();
// motor-runner.conf(5), in roff.
std::string config_man_page();

// Parses config text over the defaults. Errors (code "config") name the origin, the line and the
// key: `config /etc/motor.conf line 7: default_timeout_s: expected a whole number of seconds,
// got "abc"`. An origin of "config" (the default) or "" prints as just `config line 7: ...`.
Expected<Config> parse_config(std::string_view text, std::string_view origin = "config");

// Reads and parses a file; a missing file is an error naming the path.
Expected<Config> load_config_file(const std::string& path);

// The runner's config: `path` when given (missing is an error), else kDefaultConfigPath when it
// exists, else the embedded defaults. `origin` is set to what was read: the path, or
// kEmbeddedConfigOrigin.
inline constexpr std::string_view kEmbeddedConfigOrigin = "embedded default config";
Expected<Config> load_runner_config(const std::optional<std::string>& path, std::string& origin);

// SIGHUP: copies the keys that may change while running (Reload::kLive) from `next` into `live`.
// Returns the names of the keys whose values differ, split into taken and kept (need a restart).
struct ReloadOutcome {
  std::vector<std::string> applied;
  std::vector<std::string> kept;
};
ReloadOutcome apply_reload(Config& live, const Config& next);

// Parses sizes like "512", "64K", "2G" (powers of 1024; suffix K, M or G, either case, optionally
// followed by "B" or "iB"). Errors (code "config") say what was expected; no origin or line.
Expected<int64_t> parse_size(std::string_view text);

// The outbound network's part of the config (netpolicy/outbound.hpp).
inline netpolicy::OutboundSettings outbound_settings(const Config& c) {
  return {c.state_dir, c.outbound_uplink_netns, c.outbound_subnet, c.outbound_resolvers};
}

}  // namespace motor::config
