// Steps of the attacks on the job's limits, its environment and its lifetime (attack_steps.hpp).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include "gate/attack_steps.hpp"

namespace motor::gate {
namespace {

// The socket-buffer attack queues at most the ceiling per protocol in a 64 MiB job; reaching the
// bound means the job's limit did not hold them.
constexpr long kSocketCeilingMiB = 256;
constexpr long kSocketBoundMiB = 128;
// The fork bomb never pushes a host harder than this many tasks.
constexpr int64_t kMostTried = 8192;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Judges the fork bomb's counts against pids_max.
Verdict judge_fork_bomb(int64_t made, int64_t target, int64_t pids_max, const std::string& fork_result,
                        const std::string& ev) {
  if (made >= target) {
    return through(pids_max > kMostTried
                       ? fmt::format("{} tasks and no limit hit: pids_max = {} is more than the gate will try ({}); "
                                     "lower pids_max",
                                     made, pids_max, kMostTried)
                       : fmt::format("{} tasks and no limit hit ({})", made, ev));
  }
  // The job's tasks at the limit: motor-init, the python main thread and its threads.
  const int64_t tasks = made + 2;
  if (tasks > pids_max) return through("more tasks than pids_max: " + ev);
  if (tasks + 8 < pids_max) {
    return through("stopped below pids_max by something else (an rlimit or memory), not the pids limit: " + ev);
  }
  if (fork_result != "EAGAIN") return through(ev);
  return stopped(ev);
}

// The claim exec.status shows for the running job `job_id`, or "".
std::string status_claim(AttackEnv& env, const std::string& job_id, std::string& status_error) {
  auto st = env.call("exec.status", "{}");
  if (!st) {
    status_error = st.error().message;
    return "";
  }
  simdjson::dom::parser p;
  simdjson::dom::element root;
  simdjson::dom::array jobs;
  if (p.parse(*st).get(root) || root["running_jobs"].get_array().get(jobs)) return "";
  for (auto j : jobs) {
    std::string_view id, cpus;
    if (!j["job_id"].get_string().get(id) && id == job_id && !j["cpus"].get_string().get(cpus)) return std::string(cpus);
  }
  return "";
}

}  // namespace

Verdict fork_bomb(AttackEnv& env, const Attack& a) {
  const int64_t pids_max = env.config->pids_max;
  const int64_t target = std::min(pids_max, kMostTried) + 16;
  auto r = run_probe(env, a, fmt::format("TARGET = {}\n", target));
  if (auto v = not_run(r)) return *v;
  const auto got = parse_result_lines(r.out);
  if (!got.count("threads") || !got.count("fork at the limit")) {
    return inconclusive(fmt::format("no result (job {}; stderr: {})", r.outcome_text(), tail(r.err)));
  }
  const int64_t made = std::atoll(got.at("threads").c_str());
  const std::string fork_result = got.at("fork at the limit");
  const std::string ev = fmt::format("{} threads created, then {}; fork at the limit: {} (pids_max = {})", made,
                                     got.count("thread_error") ? got.at("thread_error") : "?", fork_result, pids_max);
  return judge_fork_bomb(made, target, pids_max, fork_result, ev);
}

Verdict memory_balloon(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a);
  if (auto v = not_run(r)) return *v;
  if (r.out.find("survived=") != std::string::npos) return through("256 MiB filled under a 64M limit (" + r.outcome_text() + ")");
  if (r.oom_killed) return stopped("OOM-killed and reported: " + r.outcome_text());
  return inconclusive("neither survived nor reported as OOM-killed: " + r.outcome_text() + "; stderr: " + tail(r.err));
}

Verdict cpuset(AttackEnv& env, const Attack& a) {
  std::string claim, status_error;
  auto r = run_job(env, probe_job(env, a), [&](const std::string& job_id) { claim = status_claim(env, job_id, status_error); });
  if (auto v = not_run(r)) return *v;
  const auto got = parse_result_lines(r.out);
  if (!got.count("Cpus_allowed_list")) return inconclusive("no Cpus_allowed_list (" + r.outcome_text() + ")");
  if (claim.empty()) return inconclusive("exec.status did not list the running job's claim " + status_error);
  const std::string seen = got.at("Cpus_allowed_list");
  const std::string online = trim(read_host("/sys/devices/system/cpu/online"));
  const std::string ev = fmt::format("claim {}, the job's Cpus_allowed_list {}, host CPUs {}", claim, seen, online);
  if (seen != claim) return through(ev);
  return stopped(ev + (seen == online ? " (one core is the whole host here)" : ""));
}

// Socket buffers charged to the job: loopback TCP connections and UDP sockets the job never reads,
// filled until the kernel stops queueing (or the gate's ceiling), in a job limited to 64M.
Verdict socket_buffers(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a, fmt::format("CEILING = {}\n", kSocketCeilingMiB << 20));
  if (auto v = not_run(r)) return *v;
  const auto got = parse_result_lines(r.out);
  if (!got.count("tcp queued MiB") || !got.count("udp queued MiB")) {
    if (r.oom_killed) return stopped("the job was OOM-killed while queueing socket buffers: they are charged to it");
    return inconclusive("no result (" + r.outcome_text() + "; stderr: " + tail(r.err) + ")");
  }
  const long tcp = std::atol(got.at("tcp queued MiB").c_str()), udp = std::atol(got.at("udp queued MiB").c_str());
  const std::string what = fmt::format("queued {} MiB of TCP and {} MiB of UDP buffers in a 64M job", tcp, udp);
  if (tcp >= kSocketBoundMiB || udp >= kSocketBoundMiB) {
    return through(what + fmt::format(" (at least {} MiB: socket buffers are not charged to the job)", kSocketBoundMiB));
  }
  return stopped(what + fmt::format(" (below {} MiB: the kernel stopped queueing at the job's limit)", kSocketBoundMiB));
}

Verdict env_canaries(AttackEnv& env, const Attack& a) {
  const std::string m = env.new_marker();
  const std::vector<std::pair<std::string, std::string>> canaries = {
      {"GH_TOKEN", "gate-canary-gh-" + m}, {"API_KEY", "gate-canary-api-" + m}, {"MY_SECRET_VALUE", "gate-canary-secret-" + m}};
  JobRequest rq = probe_job(env, a);
  rq.env = {canaries[0], canaries[1], canaries[2], {"CARGO_GATE_PROBE", "gate-forwarded-" + m}};
  auto r = run_job(env, rq);
  if (auto v = not_run(r)) return *v;
  std::vector<std::string> leaks;
  for (const auto& [name, value] : canaries) {
    if (r.out.find(value) != std::string::npos || r.err.find(value) != std::string::npos) leaks.push_back(name);
  }
  const auto got = parse_result_lines(r.out);
  if (!leaks.empty()) {
    std::vector<std::string> where;
    for (const auto& [k, v] : got) {
      if (k.rfind("canary in ", 0) == 0) where.push_back(k.substr(10));
    }
    return through(fmt::format("the job saw {} in {}", fmt::join(leaks, ", "), fmt::join(where, ", ")));
  }
  // /proc/1/environ is unreadable to the job (motor-init is not dumpable): the command's own
  // environment is init's, and /proc/self/environ shows it as the kernel holds it.
  if (!got.count("forwarded in environment") || !got.count("forwarded in /proc/self/environ")) {
    return inconclusive("the forwarded control variable CARGO_GATE_PROBE was not seen: the job's environment could not "
                        "be read (" + r.outcome_text() + "; stderr: " + tail(r.err) + ")");
  }
  return stopped(fmt::format("no canary in the environment, /proc/1/environ, /proc/self/environ or {} files; "
                             "env_not_forwarded: {}; CARGO_GATE_PROBE did cross",
                             got.count("files searched") ? got.at("files searched") : "?",
                             fmt::join(r.env_not_forwarded, ",")));
}

Verdict ssh_auth_sock(AttackEnv& env, const Attack& a) {
  JobRequest rq = probe_job(env, a);
  rq.env = {{"SSH_AUTH_SOCK", "/tmp/gate-agent-" + env.new_marker() + ".sock"}};
  return judge_lines(run_job(env, rq), a.expects);
}

Verdict daemon_outlives(AttackEnv& env, const Attack& a) {
  const std::string m = env.new_marker();
  auto r = run_probe(env, a, "MK = '3600.' + " + py_split(m) + "\n");
  if (auto v = not_run(r)) return *v;
  if (r.out.find("daemon=started") == std::string::npos) return inconclusive("the daemon did not start: " + tail(r.err));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string left = kill_leftovers(env, {m});
  if (!left.empty()) return through("the daemon outlived the job (host pids " + left + ", now killed)");
  const auto cgroups = leftover_cgroups(env);
  if (!cgroups.empty()) return through("a job cgroup remains: " + cgroups.front());
  return stopped("the command exited (" + r.outcome_text() + ") and nothing with the daemon's marker remains on the host");
}

Verdict timeout_loop(AttackEnv& env, const Attack& a) {
  const std::string m1 = env.new_marker(), m2 = env.new_marker();
  const int64_t t0 = now_ms();
  auto r = run_job(env, probe_job(env, a, "", {m1, m2}));
  const int64_t took = now_ms() - t0;
  if (!r.error.empty() || !r.have_terminal) return inconclusive("the job could not be run: " + r.outcome_text());
  if (r.out.find("looping") == std::string::npos) return inconclusive("the loop never started: " + r.outcome_text());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string left = kill_leftovers(env, {m1, m2});
  const auto cgroups = leftover_cgroups(env);
  const std::string ev = fmt::format("{} after {} ms", r.outcome_text(), took);
  if (!left.empty()) return through(ev + "; processes of the job still ran on the host (pids " + left + ", now killed)");
  if (!cgroups.empty()) return through(ev + "; job cgroups remain: " + cgroups.front());
  if (r.killed != std::optional<std::string>("deadline")) return through(ev + "; not killed at its deadline");
  return stopped(ev + "; no process of the job and no job cgroup remains");
}

}  // namespace motor::gate
