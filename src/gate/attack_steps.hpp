// What an attack's own steps (the `steps` of a row in attack_table.cpp) are made of: start its
// probe as a job, judge result lines, read and clean the host; and the steps themselves, one
// small function per attack that needs the host's side (attacks_*.cpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gate/attacks.hpp"

namespace motor::gate {

// ---- building and running the probe's job (judge.cpp) -----------------------------------------
// A python string literal, and an expression for `s` whose source text does not contain `s` (so
// that a job's own command line never matches a marker the gate looks for).
std::string py(std::string_view s);
std::string py_split(std::string_view s);
std::string py_list(const std::vector<std::string>& items);  // ['a', 'b', ]

// The row's probe as a job in the gate's workspace with the row's shape: python3 -c with the
// prelude and `values` first, or /bin/sh -c with `args` ($0, $1, ...).
JobRequest probe_job(const AttackEnv& env, const Attack& a, const std::string& values = "",
                     const std::vector<std::string>& args = {});
// A shell probe as a job in workspace `key` (a canary writer, the screen's bundle maker).
JobRequest shell_job(const std::string& key, const Probe& probe, const std::vector<std::string>& args);
// Runs a job, waiting its timeout and 30 s more for the terminal record.
JobResult run_job(AttackEnv& env, const JobRequest& rq, const std::function<void(const std::string&)>& on_first = {});
JobResult run_probe(AttackEnv& env, const Attack& a, const std::string& values = "");

// ---- judging (judge.cpp) ------------------------------------------------------------------------
Verdict stopped(std::string evidence);
Verdict through(std::string evidence);
Verdict inconclusive(std::string evidence);
// The job did not run its course: nothing can be judged.
std::optional<Verdict> not_run(const JobResult& r);
Verdict judge_lines(const JobResult& r, const std::vector<Expect>& expects, const std::vector<std::string>& info = {});
// The last `n` characters on one line.
std::string tail(const std::string& s, size_t n = 300);

// ---- the host ------------------------------------------------------------------------------------
std::string read_host(const std::string& path);
std::string host_name();
// Kills what an attack left on the host (processes with one of the markers); their pids, or "".
std::string kill_leftovers(AttackEnv& env, const std::vector<std::string>& markers);
// Job cgroups left under the gate runner's parent, in every hierarchy.
std::vector<std::string> leftover_cgroups(const AttackEnv& env);
// The host directory of the gate's own workspace `key` (the runner's opaque name for it).
std::string gate_workspace_dir(const AttackEnv& env, const std::string& key);

// ---- values and expectations computed from the gate's environment ------------------------------
std::string state_dir_values(const AttackEnv& env);
std::string pty_values(const AttackEnv& env);
std::string seccomp_tries_values(const AttackEnv& env);
std::vector<Expect> seccomp_expects();

// ---- steps: files and mounts (attacks_files.cpp) -------------------------------------------------
Verdict dotdot(AttackEnv& env, const Attack& a);
Verdict symlink_out(AttackEnv& env, const Attack& a);
Verdict hardlink(AttackEnv& env, const Attack& a);
Verdict write_caches(AttackEnv& env, const Attack& a);
Verdict setuid_binary(AttackEnv& env, const Attack& a);
Verdict mount_view(AttackEnv& env, const Attack& a);

// ---- steps: processes and the kernel (attacks_kernel.cpp) -------------------------------------
Verdict host_processes(AttackEnv& env, const Attack& a);
Verdict runner_memory(AttackEnv& env, const Attack& a);
Verdict hostname(AttackEnv& env, const Attack& a);
Verdict sysv_ipc(AttackEnv& env, const Attack& a);
Verdict cgroup_files(AttackEnv& env, const Attack& a);

// ---- steps: limits, the environment and lifetime (attacks_limits.cpp) -------------------------
Verdict fork_bomb(AttackEnv& env, const Attack& a);
Verdict memory_balloon(AttackEnv& env, const Attack& a);
Verdict cpuset(AttackEnv& env, const Attack& a);
Verdict socket_buffers(AttackEnv& env, const Attack& a);
Verdict env_canaries(AttackEnv& env, const Attack& a);
Verdict ssh_auth_sock(AttackEnv& env, const Attack& a);
Verdict daemon_outlives(AttackEnv& env, const Attack& a);
Verdict timeout_loop(AttackEnv& env, const Attack& a);

// ---- steps: workspaces, callers and the change screen (attacks_workspace.cpp) -----------------
Verdict other_caller(AttackEnv& env, const Attack& a);
Verdict unscreened_untrusted_job(AttackEnv& env, const Attack& a);
Verdict screened_code_change(AttackEnv& env, const Attack& a);
Verdict scan_fifo(AttackEnv& env, const Attack& a);
Verdict scan_memory(AttackEnv& env, const Attack& a);
Verdict cwd_oracle(AttackEnv& env, const Attack& a);

// ---- steps: the network (attacks_network.cpp) --------------------------------------------------
Verdict host_loopback(AttackEnv& env, const Attack& a);
Verdict dns(AttackEnv& env, const Attack& a);
Verdict outbound_ranges(AttackEnv& env, const Attack& a);
Verdict outbound_host(AttackEnv& env, const Attack& a);
Verdict outbound_dns_private(AttackEnv& env, const Attack& a);

}  // namespace motor::gate
