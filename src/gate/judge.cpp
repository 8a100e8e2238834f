// The pieces every attack is made of: its probe as a job, the judge of its result lines, and the
// host-side reads and clean-ups (attack_steps.hpp).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gate/attack_steps.hpp"
#include "gate/probes.hpp"
#include "workspace/workspace_names.hpp"

namespace motor::gate {

const char* result_name(Result r) {
  switch (r) {
    case Result::kStopped: return "stopped";
    case Result::kGotThrough: return "GOT THROUGH";
    case Result::kSkipped: return "skipped";
    case Result::kInconclusive: return "INCONCLUSIVE";
  }
  return "?";
}

const char* result_json_name(Result r) {
  switch (r) {
    case Result::kStopped: return "stopped";
    case Result::kGotThrough: return "got_through";
    case Result::kSkipped: return "skipped";
    case Result::kInconclusive: return "inconclusive";
  }
  return "?";
}

std::map<std::string, std::string> parse_result_lines(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && eq > 0) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

std::string py(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string py_split(std::string_view s) {
  const size_t half = s.size() / 2;
  return "(" + py(s.substr(0, half)) + " + " + py(s.substr(half)) + ")";
}

std::string py_list(const std::vector<std::string>& items) {
  std::string list = "[";
  for (const auto& i : items) list += py(i) + ", ";
  return list + "]";
}

JobRequest probe_job(const AttackEnv& env, const Attack& a, const std::string& values,
                     const std::vector<std::string>& args) {
  JobRequest rq;
  if (a.probe->python()) {
    rq.argv = {"/usr/bin/python3", "-c", std::string(probes::prelude.text) + values + std::string(a.probe->text)};
  } else {
    rq = shell_job(env.workspace_key, *a.probe, args);
  }
  rq.workspace_key = env.workspace_key;
  rq.timeout_s = a.job.timeout_s;
  rq.memory = a.job.memory;
  rq.cpus = a.job.cpus;
  rq.network = a.job.network;
  return rq;
}

JobRequest shell_job(const std::string& key, const Probe& probe, const std::vector<std::string>& args) {
  JobRequest rq;
  rq.workspace_key = key;
  rq.argv = {"/bin/sh", "-c", std::string(probe.text)};
  rq.argv.insert(rq.argv.end(), args.begin(), args.end());
  return rq;
}

JobResult run_job(AttackEnv& env, const JobRequest& rq, const std::function<void(const std::string&)>& on_first) {
  return env.run_job(rq, static_cast<int>((rq.timeout_s + 30) * 1000), on_first);
}

JobResult run_probe(AttackEnv& env, const Attack& a, const std::string& values) {
  return run_job(env, probe_job(env, a, values));
}

std::string tail(const std::string& s, size_t n) {
  std::string t = s.size() > n ? "..." + s.substr(s.size() - n) : s;
  std::replace(t.begin(), t.end(), '\n', ' ');
  return t;
}

Verdict stopped(std::string e) { return {Result::kStopped, std::move(e), false}; }
Verdict through(std::string e) { return {Result::kGotThrough, std::move(e), false}; }
Verdict inconclusive(std::string e) { return {Result::kInconclusive, std::move(e), false}; }

std::optional<Verdict> not_run(const JobResult& r) {
  if (!r.error.empty()) return inconclusive("the job could not be run: " + r.error);
  if (!r.have_terminal) return inconclusive("no terminal record");
  if (r.outcome.kind == protocol::Outcome::Kind::kRefusedBeforeStart) {
    return inconclusive("the runner refused the job: " + r.outcome_text());
  }
  return std::nullopt;
}

namespace {

bool matches(const std::string& value, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed) {
    if (!a.empty() && a.back() == '*') {
      if (value.rfind(a.substr(0, a.size() - 1), 0) == 0) return true;
    } else if (value == a) {
      return true;
    }
  }
  return false;
}

}  // namespace

Verdict judge_lines(const JobResult& r, const std::vector<Expect>& expects, const std::vector<std::string>& info) {
  if (auto v = not_run(r)) return *v;
  const auto got = parse_result_lines(r.out);
  std::vector<std::string> held, broke, missing;
  for (const auto& e : expects) {
    auto it = got.find(e.label);
    if (it == got.end()) {
      missing.push_back(e.label);
      continue;
    }
    const std::string& v = it->second;
    if (matches(v, e.stopped)) {
      held.push_back(e.label + ": " + v);
    } else if (v.rfind("OK", 0) == 0) {
      broke.push_back(e.label + ": succeeded " + v);
    } else {
      broke.push_back(fmt::format("{}: {} (expected {}: something else stopped it, not this control)", e.label, v,
                                  fmt::join(e.stopped, " or ")));
    }
  }
  std::vector<std::string> extra;
  for (const auto& l : info) {
    if (auto it = got.find(l); it != got.end()) extra.push_back(l + ": " + it->second);
  }
  const std::string extra_text = extra.empty() ? "" : fmt::format("; {}", fmt::join(extra, "; "));
  if (!broke.empty()) return through(fmt::format("{}{}", fmt::join(broke, "; "), extra_text));
  if (!missing.empty()) {
    return inconclusive(fmt::format("no result for {} (job {}; stderr: {})", fmt::join(missing, ", "), r.outcome_text(),
                                    tail(r.err)));
  }
  return stopped(fmt::format("{}{}", fmt::join(held, "; "), extra_text));
}

std::string read_host(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string kill_leftovers(AttackEnv& env, const std::vector<std::string>& markers) {
  std::vector<std::string> found;
  for (const auto& m : markers) {
    for (pid_t p : env.processes_with(m)) {
      found.push_back(std::to_string(p));
      kill(p, SIGKILL);
    }
  }
  return fmt::format("{}", fmt::join(found, ","));
}

std::vector<std::string> leftover_cgroups(const AttackEnv& env) {
  std::vector<std::string> out;
  for (const auto& m : env.facts.cgroup_mounts) {
    const std::string parent = m + "/" + env.cgroup_parent;
    if (DIR* d = opendir(parent.c_str())) {
      while (dirent* e = readdir(d)) {
        // Jobs' cgroups only: the runner's sandboxes built ahead wait in one of its own.
        if (e->d_type == DT_DIR && std::string_view(e->d_name).starts_with("job-")) out.push_back(parent + "/" + e->d_name);
      }
      closedir(d);
    }
  }
  return out;
}

std::string gate_workspace_dir(const AttackEnv& env, const std::string& key) {
  auto dir = workspace::workspace_dir_path(env.workspace_root, "root", key);
  return dir ? *dir : std::string();
}

}  // namespace motor::gate
