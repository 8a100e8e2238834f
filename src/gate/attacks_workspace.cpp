// Steps of the attacks on workspaces, callers and the change screen (attack_steps.hpp): a second
// caller's job, workspaces the gate prepares itself (a bundle a job of the gate makes), and the
// runner's scan after a job.
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <simdjson.h>

#include "gate/attack_steps.hpp"
#include "gate/probes.hpp"
#include "protocol/json_writer.hpp"

namespace motor::gate {
namespace {

namespace fs = std::filesystem;

// How long a scan attack waits for the terminal record of a job that ends in seconds (the scan's
// own deadline is 5 minutes).
constexpr int kScanWaitMs = 45'000;

// An untrusted job in workspace `key` (on the host at `host_dir`) that writes a canary there;
// `ran`: the canary was written or the job started at all.
struct CanaryRun {
  JobResult job;
  bool ran = false;
};
CanaryRun untrusted_canary_job(AttackEnv& env, const std::string& key, const std::string& host_dir) {
  const std::string name = "gate-screen-canary-" + env.new_marker();
  JobRequest rq = shell_job(key, probes::untrusted_canary, {name});
  rq.untrusted = true;
  rq.timeout_s = 30;
  CanaryRun c{run_job(env, rq), false};
  const std::string host_file = host_dir + "/" + name;
  c.ran = read_host(host_file) == "ran\n" ||
          (c.job.have_terminal && c.job.outcome.kind != protocol::Outcome::Kind::kRefusedBeforeStart);
  ::unlink(host_file.c_str());
  return c;
}

// A workspace of the gate's own, prepared from the bundle a job of the gate makes
// (probes/screen-bundle.sh): the transfer as the client does it, on a fresh session.
struct GatePrepare {
  std::string key, base, commit, tree;
  std::string reason;  // "prepared", a refusal reason, or "" when the gate could not get that far
  std::string detail;  // the prepare's refusal_detail (the screen's reasons), if any
  std::string error;   // what stopped the gate itself (then the attack is inconclusive)
};

// The bundle of a docs base and a build.rs change on top, made by a job of the gate.
std::string make_bundle(AttackEnv& env, GatePrepare& out) {
  const std::string bundle_name = out.key + ".bundle";
  const auto made = run_job(env, shell_job(env.workspace_key, probes::screen_bundle, {bundle_name}));
  const std::string bundle_path = env.workspace + "/" + bundle_name;
  std::string bundle = read_host(bundle_path);
  ::unlink(bundle_path.c_str());
  std::istringstream ids(made.out);
  ids >> out.base >> out.commit >> out.tree;
  if (!made.exited(0) || bundle.empty() || !protocol::is_object_id(out.tree)) {
    out.error = "the gate's job could not make the bundle: " + made.outcome_text() + " " + tail(made.err);
    bundle.clear();
  }
  return bundle;
}

GatePrepare prepare_gate_workspace(AttackEnv& env, const std::string& key, bool untrusted) {
  GatePrepare out;
  out.key = key;
  const std::string bundle = make_bundle(env, out);
  if (!out.error.empty()) return out;
  auto session = RunnerSession::connect_socket(env.socket_path);
  if (!session) {
    out.error = "cannot reach the runner: " + session.error().message;
    return out;
  }
  auto& s = **session;
  protocol::JsonWriter w;
  w.begin_object().field("workspace_key", key).field("repository_root", "/gate/" + key).field("tree_hash", out.tree);
  if (untrusted) w.field("untrusted", true).field("screen_base", out.base);
  w.end_object();
  auto first = s.call("workspace.prepare", w.str(), 60'000);
  simdjson::dom::parser parser;
  std::string_view transfer;
  if (!first || parser.parse(*first)["transfer_id"].get_string().get(transfer)) {
    out.error = "workspace.prepare: " + (first ? *first : first.error().message);
    return out;
  }
  const std::string tid(transfer);
  protocol::JsonWriter u;
  u.begin_object().field("transfer_id", tid).field("offset", 0).key("data").base64(bundle).end_object();
  auto uploaded = s.call("workspace.upload", u.str(), 60'000);
  protocol::JsonWriter f;
  f.begin_object().field("transfer_id", tid).field("commit", out.commit).field("bundle_bytes", bundle.size()).end_object();
  auto finished = uploaded ? s.call("workspace.finish", f.str(), 120'000) : uploaded;
  out.reason = "?";
  std::string_view reason, detail;
  if (finished && !parser.parse(*finished)["refusal_detail"].get_string().get(detail)) out.detail = std::string(detail);
  if (finished && !parser.parse(*finished)["outcome"]["reason"].get_string().get(reason)) out.reason = std::string(reason);
  else if (finished && finished->find("\"prepared\"") != std::string::npos) out.reason = "prepared";
  return out;
}

void drop_gate_workspace(AttackEnv& env, const std::string& key) {
  if (auto session = RunnerSession::connect_socket(env.socket_path)) {
    (void)(*session)->call("workspace.drop", fmt::format(R"({{"workspace_key":"{}"}})", key), 60'000);
  }
}

// The row's probe in a workspace the gate prepared; the scan runs after the job and before its
// terminal record, so a scan that blocks shows as a record that does not come (the job itself
// ends in seconds).
Expected<JobResult> job_in_scanned_workspace(AttackEnv& env, const Attack& a) {
  const std::string key = "gate-scan-" + env.new_marker();
  const GatePrepare prepared = prepare_gate_workspace(env, key, false);
  if (!prepared.error.empty()) return make_error("gate", prepared.error);
  if (prepared.reason != "prepared") return make_error("gate", "the gate's workspace was not prepared: " + prepared.reason);
  JobRequest rq = probe_job(env, a);
  rq.workspace_key = key;
  const JobResult r = env.run_job(rq, kScanWaitMs, {});
  drop_gate_workspace(env, key);
  // A scan that blocked keeps the workspace busy and the drop is refused: the gate removes it
  // from the host itself (remove_all follows no symlink).
  std::error_code ec;
  fs::remove_all(gate_workspace_dir(env, key), ec);
  return r;
}

// The terminal record's workspace_changes, or "<none>" without a record.
std::string workspace_changes(const JobResult& r) {
  if (!r.have_terminal) return "<none>";
  simdjson::dom::parser parser;
  simdjson::dom::element changes;
  if (parser.parse(r.terminal_json)["workspace_changes"].get(changes)) return "<missing>";
  return simdjson::minify(changes);
}

}  // namespace

Verdict other_caller(AttackEnv& env, const Attack& a) {
  const std::string canary = "gate-other-canary-" + env.new_marker();
  JobRequest other = shell_job(env.workspace_key, probes::other_caller_canary, {canary});
  other.timeout_s = 30;
  auto made = env.run_job_as_other(other, 60'000);
  const std::string host_file = env.other_workspace + "/secret.txt";
  if (!made.exited(0) || read_host(host_file) != canary) {
    return inconclusive("the other caller's job did not write " + host_file + ": " + made.outcome_text() + " " + tail(made.err));
  }
  const std::string rel = "/workspace/.." + env.other_workspace.substr(env.workspace_root.size()) + "/secret.txt";
  auto r = run_probe(env, a, fmt::format("HOST = {}\nREL = {}\n", py(host_file), py(rel)));
  if (r.out.find(canary) != std::string::npos) return through("the other caller's secret was read");
  return judge_lines(r, {{"read " + host_file, {"ENOENT"}}, {"read " + rel, {"ENOENT"}}});
}

// The change screen (docs/change-screen.md): a job of an untrusted run whose workspace's change
// did not pass the screen must not start. The gate's workspace was never prepared as untrusted.
Verdict unscreened_untrusted_job(AttackEnv& env, const Attack&) {
  auto [r, ran] = untrusted_canary_job(env, env.workspace_key, env.workspace);
  if (ran) return through("the job ran: " + r.outcome_text());
  if (r.outcome.reason != "screen_refused") return inconclusive("not refused by the screen: " + r.outcome_text());
  return stopped("refused before start: " + r.outcome_text());
}

// A trusted job of the gate makes the bundle of a real change (a docs base, then a build.rs on
// top) in its workspace; the gate prepares it as an untrusted workspace and asks for an untrusted
// job in it. Both must be refused: the job's canary is never written.
Verdict screened_code_change(AttackEnv& env, const Attack&) {
  const std::string key = "gate-screen-" + env.new_marker();
  const GatePrepare prepared = prepare_gate_workspace(env, key, true);
  if (!prepared.error.empty()) return inconclusive(prepared.error);
  // The untrusted job either way: it must not run.
  auto [r, ran] = untrusted_canary_job(env, key, gate_workspace_dir(env, key));
  drop_gate_workspace(env, key);
  if (ran) return through(fmt::format("the prepare: {}; the job ran: {}", prepared.reason, r.outcome_text()));
  if (prepared.reason != "screen_refused" || r.outcome.reason != "screen_refused") {
    return inconclusive(fmt::format("the prepare: {}; the job: {}", prepared.reason, r.outcome_text()));
  }
  return stopped("the prepare and the job were refused (screen_refused): " + tail(prepared.detail, 200));
}

Verdict scan_fifo(AttackEnv& env, const Attack& a) {
  auto r = job_in_scanned_workspace(env, a);
  if (!r) return inconclusive(r.error().message);
  if (!r->have_terminal) {
    return through(fmt::format("no terminal record {} s after the job was sent: the scan blocked on the FIFO "
                               "(the workspace stays busy, its queue waits)", kScanWaitMs / 1000));
  }
  const std::string changes = workspace_changes(*r);
  if (changes != R"(["README.md"])") return inconclusive("the scan did not report the edit: workspace_changes " + changes);
  return stopped("the scan finished and reported " + changes + " (" + r->outcome_text() + ")");
}

Verdict scan_memory(AttackEnv& env, const Attack& a) {
  auto r = job_in_scanned_workspace(env, a);
  if (!r) return inconclusive(r.error().message);
  if (!r->have_terminal) return inconclusive("no terminal record: " + r->error);
  const std::string changes = workspace_changes(*r);
  if (changes == "null") return stopped("the scan was stopped at the job's limit: workspace_changes null");
  return through("the scan loaded 160 MiB of patterns past the job's 64M: workspace_changes " + changes);
}

// --cwd resolved inside the workspace: the job plants a symlink to a host directory that exists
// and one to a path that does not; a job with either as its cwd must get the same answer.
Verdict cwd_oracle(AttackEnv& env, const Attack& a) {
  const std::string m = env.new_marker();
  const std::string present = "gate-cwd-present-" + m, missing = "gate-cwd-missing-" + m;
  auto planted = run_probe(env, a, fmt::format("A = {}\nB = {}\nM = {}\n", py(present), py(missing), py(m)));
  if (auto v = not_run(planted)) return *v;
  if (parse_result_lines(planted.out).count("planted") == 0) return inconclusive("the symlinks were not planted: " + tail(planted.err));
  auto ask = [&](const std::string& cwd) {
    JobRequest rq;
    rq.workspace_key = env.workspace_key;
    rq.argv = {"/bin/true"};
    rq.cwd = cwd;
    rq.timeout_s = 20;
    return run_job(env, rq);
  };
  const JobResult to_present = ask(present), to_missing = ask(missing);
  std::error_code ec;
  fs::remove(env.workspace + "/" + present, ec);
  fs::remove(env.workspace + "/" + missing, ec);
  for (const auto* r : {&to_present, &to_missing}) {
    if (!r->error.empty() || !r->have_terminal) return inconclusive("a job could not be run: " + r->error);
  }
  const std::string a_text = to_present.outcome_text(), b_text = to_missing.outcome_text();
  const auto refused = protocol::Outcome::Kind::kRefusedBeforeStart;
  // The names differ; the answers may not, apart from the name itself.
  auto unnamed = [](std::string s, const std::string& name) {
    for (size_t at; (at = s.find(name)) != std::string::npos;) s.replace(at, name.size(), "NAME");
    return s;
  };
  if (to_present.outcome.kind != refused || to_missing.outcome.kind != refused ||
      unnamed(a_text, present) != unnamed(b_text, missing)) {
    return through(fmt::format("cwd -> /root (exists on the host): {}; cwd -> a missing path: {}", a_text, b_text));
  }
  return stopped("both refused alike: " + a_text);
}

}  // namespace motor::gate
