// Steps of the attacks on files and mounts (attack_steps.hpp): the gate plants on the host what
// the job tries to reach, and looks on the host for what the job may have made.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gate/attack_steps.hpp"

namespace motor::gate {

namespace fs = std::filesystem;

Verdict dotdot(AttackEnv& env, const Attack& a) {
  const std::string name = "gate-escape-" + env.new_marker();
  auto r = run_probe(env, a, "NAME = " + py(name) + "\n");
  const fs::path ws(env.workspace);
  for (const auto& p : {ws.parent_path() / name, ws.parent_path().parent_path() / name, fs::path("/") / name}) {
    std::error_code ec;
    if (fs::exists(p, ec)) {
      fs::remove(p, ec);
      return through("the job created " + p.string() + " on the host (removed)");
    }
  }
  return judge_lines(r, {{"create /workspace/../" + name, {"EROFS"}}, {"create /workspace/../../../tmp/../" + name, {"EROFS"}}});
}

Verdict symlink_out(AttackEnv& env, const Attack& a) {
  const std::string m = env.new_marker();
  const std::string dir_link = "gate-link-dir-" + m, shadow_link = "gate-link-shadow-" + m;
  std::error_code ec;
  fs::create_directory_symlink(env.outside_dir, env.workspace + "/" + dir_link, ec);
  if (ec) return inconclusive("could not plant " + dir_link + ": " + ec.message());
  fs::create_symlink("/etc/shadow", env.workspace + "/" + shadow_link, ec);
  if (ec) return inconclusive("could not plant " + shadow_link + ": " + ec.message());
  const std::string target = "pwned-" + m;
  auto r = run_probe(env, a, fmt::format("D = '/workspace/' + {}\nS = '/workspace/' + {}\nF = {}\n", py(dir_link),
                                         py(shadow_link), py(target)));
  if (fs::exists(env.outside_dir + "/" + target, ec)) {
    return through("the job wrote " + env.outside_dir + "/" + target + " on the host");
  }
  return judge_lines(r, {{"write through the link to " + env.outside_dir, {"ENOENT"}},
                         {"read through the link to /etc/shadow", {"ENOENT"}}});
}

Verdict hardlink(AttackEnv& env, const Attack& a) {
  const std::string m = env.new_marker();
  const std::string target = env.outside_dir + "/target-" + m;
  std::ofstream(target) << "gate hard-link target\n";
  chmod(target.c_str(), 0666);
  auto r = run_probe(env, a, fmt::format("HOST = {}\nM = {}\n", py(target), py(m)));
  struct stat st {};
  if (stat(target.c_str(), &st) == 0 && st.st_nlink > 1) return through("the host file " + target + " gained a link");
  return judge_lines(r, {{"link " + target, {"ENOENT"}},
                         {"link /usr/bin/id", {"EXDEV", "EPERM"}},
                         {"link /etc/passwd", {"EXDEV", "EPERM"}}});
}

Verdict write_caches(AttackEnv& env, const Attack& a) {
  const std::string name = "gate-cache-probe-" + env.new_marker();
  const auto& caches = env.config->cache_paths;
  auto r = run_probe(env, a, "CACHES = " + py_list(caches) + "\nNAME = " + py(name) + "\n");
  std::vector<std::string> appeared;
  for (const auto& c : caches) {
    std::error_code ec;
    if (fs::remove(c + "/" + name, ec)) appeared.push_back(c + "/" + name);
  }
  if (!appeared.empty()) return through(fmt::format("the job created {} on the host (removed)", fmt::join(appeared, ", ")));
  std::vector<Expect> ex;
  // The create may succeed: a Linux job writes into its private layer over the cache
  // (sandbox/overlay.hpp). What must hold is that nothing appeared on the host (checked above).
  for (const auto& c : caches) ex.push_back({"create in " + c, {"OK*", "EROFS"}});
  return judge_lines(r, ex);
}

Verdict setuid_binary(AttackEnv& env, const Attack& a) {
  const std::string name = "gate-suid-id-" + env.new_marker();
  const std::string planted = env.workspace + "/" + name;
  std::error_code ec;
  fs::copy_file("/usr/bin/id", planted, fs::copy_options::overwrite_existing, ec);
  struct stat st {};
  if (ec || chown(planted.c_str(), 0, 0) != 0 || chmod(planted.c_str(), 04755) != 0 || stat(planted.c_str(), &st) != 0 ||
      !(st.st_mode & S_ISUID) || st.st_uid != 0) {
    return inconclusive("could not plant a setuid-root copy of /usr/bin/id at " + planted);
  }
  auto r = run_probe(env, a, "ID = '/workspace/' + " + py(name) + "\n");
  Verdict v = judge_lines(r, {{"id -u", {"OK: " + std::to_string(env.job_uid)}}}, a.info);
  if (v.result == Result::kStopped && r.out.find("euid=0") != std::string::npos) return through(v.evidence);
  return v;
}

// What a job's mount table says about the host (issue 15's mountinfo leak): a bind's root field
// is the bound directory's path within its filesystem, so the workspace's host directory must
// have a name that says nothing (an opaque id), and motor-init must not be a bind at all (it is
// exec'd from an fd). The location of the workspace root within its filesystem stays visible
// (an accepted limit, docs/job-isolation.md): reported, not judged.
Verdict mount_view(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a);
  if (auto v = not_run(r)) return *v;
  const auto got = parse_result_lines(r.out);
  const auto root = got.find("workspace root");
  if (root == got.end()) return inconclusive("no /workspace line in the job's mountinfo: " + tail(r.out));
  const std::string init = env.config && !env.config->init_path.empty()
                               ? env.config->init_path
                               : env.self_exe.substr(0, env.self_exe.rfind('/')) + "/motor-init";
  std::vector<std::string> seen;
  for (const auto& [what, needle] : std::vector<std::pair<std::string, std::string>>{
           {"the workspace key", env.workspace_key}, {"the caller's name as a directory", "/root/"},
           {"motor-init's host path", init}}) {
    if (r.out.find(needle) != std::string::npos) seen.push_back(fmt::format("{} ({})", what, needle));
  }
  const std::string id = env.workspace.substr(env.workspace.rfind('/') + 1);
  const std::string limit =
      fmt::format("the workspace root's place in its filesystem shows (accepted limit): {}", root->second);
  if (!seen.empty()) return through(fmt::format("the job's mount tables show {}; {}", fmt::join(seen, ", "), limit));
  if (!root->second.ends_with("/" + id)) return through("the workspace's root field is not its opaque id: " + root->second);
  return stopped(fmt::format("neither the key, the caller nor motor-init's path; /workspace is /{}; {}", id, limit));
}

}  // namespace motor::gate
