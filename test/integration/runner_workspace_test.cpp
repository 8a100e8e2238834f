// Workspaces (issue 7) end to end: a real Git checkout, the real `motor` client and a real
// runner. What arrives, what stays warm, what a bad transfer leaves, what a job's writes report,
// and what a job's hostile .git, hooks and symlinks can make the runner do (nothing).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "protocol/base64.hpp"
#include "support/checkout_fixture.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

// Every file below `dir` (not .git) with its content, for "left as it was" checks.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  auto listing = run_program({"/usr/bin/find", dir, "-path", dir + "/.git", "-prune", "-o", "-type", "f", "-print"});
  std::istringstream in(listing.out);
  for (std::string path; std::getline(in, path);) out[path.substr(dir.size())] = read_file(path);
  return out;
}

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return -1;
  return st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

class RunnerWorkspace : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override {
    return "printf 'target/\\n*.log\\n' > .gitignore && mkdir -p src && echo 'fn main() {}' > src/main.rs && "
           "for i in 1 2 3 4 5; do echo line $i > f$i.txt; done";
  }
  CommandResult motor(const std::vector<std::string>& args, const std::string& cwd = "") {
    return runner_->client_in(cwd.empty() ? repo_ : cwd, args, env_);
  }
  std::string ws(const std::string& key = "k") { return runner_->workspace(key); }
  int64_t prepared_bytes(const CommandResult& r) {
    const auto at = r.out.find(", ");
    return at == std::string::npos ? -1 : std::atoll(r.out.c_str() + at + 2);
  }

};

TEST_F(RunnerWorkspace, EditsNewFilesAndDeletionsArriveIgnoredFilesDoNotCallerRepoUntouched) {
  // The caller has a stash, a staged change and unstaged edits: none of it may move.
  sh(repo_, "echo stashed >> f5.txt && git stash -q && echo staged >> f4.txt && git add f4.txt && "
            "echo edited >> f1.txt && rm f2.txt && echo brand new > new.txt && mkdir -p target && "
            "echo built > target/out && echo noise > debug.log");
  const std::string refs_before = sh(repo_, "git for-each-ref; git rev-parse HEAD; git stash list | wc -l");
  const std::string index_before = read_file(repo_ + "/.git/index");
  const std::string status_before = sh(repo_, "git status --porcelain");

  auto r = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(r.exit_code, 0) << r.err << runner_->log();
  EXPECT_EQ(read_file(ws() + "/f1.txt"), "line 1\nedited\n");
  EXPECT_EQ(read_file(ws() + "/f4.txt"), "line 4\nstaged\n");
  EXPECT_EQ(read_file(ws() + "/f5.txt"), "line 5\n");  // the stash is not the work tree
  EXPECT_EQ(read_file(ws() + "/new.txt"), "brand new\n");
  EXPECT_EQ(read_file(ws() + "/src/main.rs"), "fn main() {}\n");
  EXPECT_FALSE(exists(ws() + "/f2.txt"));
  EXPECT_FALSE(exists(ws() + "/debug.log"));
  EXPECT_FALSE(exists(ws() + "/target"));
  EXPECT_FALSE(exists(ws() + "/.git"));

  EXPECT_EQ(sh(repo_, "git for-each-ref; git rev-parse HEAD; git stash list | wc -l"), refs_before);
  EXPECT_EQ(read_file(repo_ + "/.git/index"), index_before);
  EXPECT_EQ(sh(repo_, "git status --porcelain"), status_before);
}

TEST_F(RunnerWorkspace, SecondPrepareAfterOneLineEditSendsSmallBundleAndRewritesOneFile) {
  sh(repo_, "mkdir -p many && for i in $(seq 1 300); do echo content $i > many/file$i.txt; done");
  auto first = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // A build output and old mtimes on everything, so a rewrite cannot hide in the same second.
  sh(ws(), "mkdir -p target && echo artefact > target/bin && find . -exec touch -h -d '2001-01-01 00:00:00' {} +");
  std::map<std::string, int64_t> before;
  for (const auto& [path, content] : snapshot(ws())) before[path] = mtime_ns(ws() + path);

  sh(repo_, "echo one more line >> many/file7.txt");
  auto second = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_GT(prepared_bytes(first), 4000) << first.out;
  EXPECT_LT(prepared_bytes(second), 1500) << second.out;
  EXPECT_LT(prepared_bytes(second) * 5, prepared_bytes(first)) << first.out << second.out;
  EXPECT_EQ(read_file(ws() + "/many/file7.txt"), "content 7\none more line\n");
  std::vector<std::string> rewritten;
  for (const auto& [path, t] : before) {
    if (mtime_ns(ws() + path) != t) rewritten.push_back(path);
  }
  EXPECT_EQ(rewritten, std::vector<std::string>{"/many/file7.txt"});
  EXPECT_EQ(read_file(ws() + "/target/bin"), "artefact\n");

  // The same tree again: nothing is sent at all.
  auto third = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(prepared_bytes(third), 0) << third.out;
}

// A new workspace of a tree another workspace of the same repository has is checked out from the
// mirror: nothing is sent. A tree nobody has is sent as before.
TEST_F(RunnerWorkspace, ANewWorkspaceOfATreeAnotherHasIsPreparedWithoutABundle) {
  auto first = motor({"workspace", "prepare", "-w", "a"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_GT(prepared_bytes(first), 0) << first.out;
  auto same = motor({"workspace", "prepare", "-w", "b"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(prepared_bytes(same), 0) << same.out;
  EXPECT_EQ(snapshot(ws("b")), snapshot(ws("a")));
  EXPECT_FALSE(exists(ws("b") + "/.git"));

  sh(repo_, "echo edited >> f1.txt");
  auto edited = motor({"workspace", "prepare", "-w", "c"});
  ASSERT_EQ(edited.exit_code, 0) << edited.err;
  EXPECT_GT(prepared_bytes(edited), 0) << edited.out;
  EXPECT_EQ(read_file(ws("c") + "/f1.txt"), "line 1\nedited\n");
  EXPECT_EQ(read_file(ws("b") + "/f1.txt"), "line 1\n");
  // A run in b first syncs it to c's tree (no bundle either), then changes it; a prepare undoes that.
  auto job = motor({"run", "-w", "b", "--", "sh", "-c", "echo more >> f2.txt"});
  ASSERT_EQ(job.exit_code, 0) << job.err;
  auto again = motor({"workspace", "prepare", "-w", "b"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(prepared_bytes(again), 0) << again.out;
  EXPECT_EQ(read_file(ws("b") + "/f2.txt"), "line 2\n");
  EXPECT_EQ(read_file(ws("b") + "/f1.txt"), "line 1\nedited\n");
}

class RunnerWorkspaceSmallLimit : public RunnerWorkspace {
  std::string extra_config() override { return "max_bundle_size = 1M\n"; }
};

TEST_F(RunnerWorkspaceSmallLimit, CorruptBundleWrongTreeCutTransferAndOversizeLeaveWorkspaceAsItWas) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  const auto before = snapshot(ws());
  ASSERT_FALSE(before.empty());
  // A real bundle of another tree, from the caller's side.
  sh(repo_, "echo changed > f1.txt && git add -A && git commit -qm two && git update-ref refs/motor/synthetic HEAD && "
            "git bundle create -q ../good.bundle refs/motor/synthetic");
  const std::string commit = sh(repo_, "git rev-parse HEAD").substr(0, 40);
  const std::string tree = sh(repo_, "git rev-parse HEAD^{tree}").substr(0, 40);
  const std::string good = read_file(base_ + "/good.bundle");
  const std::string root = json_quote(repo_);
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.connected());
  int64_t id = 1;
  auto transfer = [&](const std::string& tree_hash, const std::string& bytes, const std::string& commit_id) {
    const std::string p = call_method(c, id++, "workspace.prepare",
                               fmt::format(R"({{"workspace_key":"k","repository_root":{},"tree_hash":"{}"}})", root, tree_hash));
    const std::string tid = json_field(p, "/result/transfer_id");
    std::string last;
    for (size_t at = 0; at < bytes.size(); at += 400 * 1024) {
      last = call_method(c, id++, "workspace.upload",
                  fmt::format(R"({{"transfer_id":"{}","offset":{},"data":"{}"}})", tid, at,
                              protocol::base64_encode(bytes.substr(at, 400 * 1024))));
      if (json_field(last, "/result/outcome/type") != "<missing>") return last;
    }
    return call_method(c, id++, "workspace.finish",
                fmt::format(R"({{"transfer_id":"{}","commit":"{}","bundle_bytes":{}}})", tid, commit_id, bytes.size()));
  };
  std::string corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x5a;
  corrupt[corrupt.size() - 30] ^= 0x5a;
  auto r = transfer(tree, corrupt, commit);
  EXPECT_EQ(json_field(r, "/result/outcome/reason"), "bundle_rejected") << r;
  EXPECT_EQ(snapshot(ws()), before);

  r = transfer(std::string(40, 'a'), good, commit);
  EXPECT_EQ(json_field(r, "/result/outcome/reason"), "tree_hash_mismatch") << r;
  EXPECT_EQ(snapshot(ws()), before);

  // A well-formed bundle whose tree names a blob the runner never received (its commit was left
  // out as a prerequisite the runner does not have; no deltas, so the pack itself is whole):
  // index-pack --strict refuses the dangling links before anything reaches the workspace.
  sh(repo_, "echo only here > absent.txt && git add absent.txt && git commit -qm three && echo again > f2.txt && "
            "git commit -qam four && { printf '# v2 git bundle\\n-%s three\\n%s refs/motor/synthetic\\n\\n' "
            "$(git rev-parse HEAD~1 HEAD); printf '%s\\n^%s\\n' $(git rev-parse HEAD HEAD~1) | "
            "git pack-objects --revs --stdout -q; } > ../dangling.bundle");
  r = transfer(sh(repo_, "git rev-parse HEAD^{tree}").substr(0, 40), read_file(base_ + "/dangling.bundle"),
               sh(repo_, "git rev-parse HEAD").substr(0, 40));
  EXPECT_EQ(json_field(r, "/result/outcome/reason"), "bundle_rejected") << r;
  EXPECT_EQ(snapshot(ws()), before);
  // The announced commit must be the bundle's ref.
  r = transfer(tree, good, std::string(40, 'b'));
  EXPECT_EQ(json_field(r, "/result/outcome/reason"), "bundle_rejected") << r;
  EXPECT_EQ(snapshot(ws()), before);

  std::string big(1536 * 1024, 'x');
  r = transfer(tree, big, commit);
  EXPECT_EQ(json_field(r, "/result/outcome/reason"), "bundle_rejected") << r;
  EXPECT_NE(r.find("max_bundle_size"), std::string::npos) << r;
  EXPECT_EQ(snapshot(ws()), before);

  // Cut mid-transfer: half the bundle, then the connection closes.
  {
    RawClient cut(runner_->socket());
    const std::string p = call_method(cut, 1, "workspace.prepare",
                               fmt::format(R"({{"workspace_key":"k","repository_root":{},"tree_hash":"{}"}})", root, tree));
    const std::string tid = json_field(p, "/result/transfer_id");
    call_method(cut, 2, "workspace.upload",
         fmt::format(R"({{"transfer_id":"{}","offset":0,"data":"{}"}})", tid, protocol::base64_encode(good.substr(0, good.size() / 2))));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(snapshot(ws()), before);
  EXPECT_EQ(sh(runner_->state_dir(), "ls transfers | wc -l"), "0\n");  // its upload is gone

  // And the good bundle still applies afterwards.
  r = transfer(tree, good, commit);
  EXPECT_EQ(json_field(r, "/result/outcome/type"), "prepared") << r;
  EXPECT_EQ(read_file(ws() + "/f1.txt"), "changed\n");
}

TEST_F(RunnerWorkspace, HostileKeysAreRejected) {
  RawClient c(runner_->socket());
  int64_t id = 1;
  for (const std::string& key : std::vector<std::string>{"../other", "a/b", "", ".hidden", "..", std::string(200, 'k'), "x y"}) {
    auto r = call_method(c, id++, "workspace.prepare",
                  fmt::format(R"({{"workspace_key":{},"repository_root":"/r","tree_hash":"{}"}})", json_quote(key),
                              std::string(40, 'a')));
    EXPECT_EQ(json_field(r, "/result/outcome/reason"), "workspace_key_rejected") << key << ": " << r;
    r = call_method(c, id++, "workspace.drop", fmt::format(R"({{"workspace_key":{}}})", json_quote(key)));
    EXPECT_EQ(json_field(r, "/error/code"), "bad_request") << key << ": " << r;
  }
  auto r = call_method(c, id++, "workspace.prepare",
                R"({"workspace_key":"a\u0000b","repository_root":"/r","tree_hash":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})");
  EXPECT_EQ(json_field(r, "/error/code"), "bad_request") << r;
  auto cli = motor({"workspace", "prepare", "-w", "../escape"});
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_NE(cli.err.find("workspace_key_rejected"), std::string::npos) << cli.err;
}

TEST_F(RunnerWorkspace, AnotherCallerCannotNameOrReachTheWorkspace) {
  auto alice = RawClient::via_bridge(runner_->socket(), "alice");
  auto bob = RawClient::via_bridge(runner_->socket(), "bob");
  sh(repo_, "git update-ref refs/motor/synthetic HEAD && git bundle create -q ../b.bundle refs/motor/synthetic");
  const std::string commit = sh(repo_, "git rev-parse HEAD").substr(0, 40);
  const std::string tree = sh(repo_, "git rev-parse HEAD^{tree}").substr(0, 40);
  const std::string bundle = read_file(base_ + "/b.bundle");
  auto p = call_method(*alice, 1, "workspace.prepare",
                fmt::format(R"({{"workspace_key":"shared","repository_root":{},"tree_hash":"{}"}})", json_quote(repo_), tree));
  const std::string tid = json_field(p, "/result/transfer_id");
  // Bob cannot feed or finish alice's transfer, even knowing its id.
  auto b = call_method(*bob, 1, "workspace.upload",
                fmt::format(R"({{"transfer_id":"{}","offset":0,"data":"{}"}})", tid, protocol::base64_encode(bundle)));
  EXPECT_EQ(json_field(b, "/error/code"), "bad_request") << b;
  call_method(*alice, 2, "workspace.upload", fmt::format(R"({{"transfer_id":"{}","offset":0,"data":"{}"}})", tid, protocol::base64_encode(bundle)));
  auto f = call_method(*alice, 3, "workspace.finish",
                fmt::format(R"({{"transfer_id":"{}","commit":"{}","bundle_bytes":{}}})", tid, commit, bundle.size()));
  ASSERT_EQ(json_field(f, "/result/outcome/type"), "prepared") << f << runner_->log();
  const std::string alice_ws = runner_->workspace("shared", "alice");
  ASSERT_TRUE(exists(alice_ws + "/f1.txt"));

  auto list = call_method(*bob, 2, "workspace.list", "{}");
  EXPECT_EQ(list.find("shared"), std::string::npos) << list;
  auto drop = call_method(*bob, 3, "workspace.drop", R"({"workspace_key":"shared"})");
  EXPECT_EQ(json_field(drop, "/result/dropped"), "false") << drop;
  EXPECT_TRUE(exists(alice_ws + "/f1.txt"));
  // Bob's job naming "shared" as a sibling gets nothing of alice's.
  bob->send_frame(R"({"id":4,"method":"exec.run","params":{"command":"ls /siblings/shared","siblings":["shared"]}})");
  std::string terminal;
  while (auto frame = bob->read_frame()) {
    if (frame->find("\"terminal\"") != std::string::npos) {
      terminal = *frame;
      break;
    }
  }
  EXPECT_EQ(json_field(terminal, "/outcome/reason"), "workspace_setup_failed") << terminal;
}

TEST_F(RunnerWorkspace, JobWritesShowUpInTheTerminalRecord) {
  sh(repo_, "mkdir -p src/deep");
  auto r = motor({"run", "-w", "k", "--json", "-c",
                  "mkdir -p /workspace/target && pwd > /workspace/target/cwd; echo more >> /workspace/f1.txt; rm /workspace/f2.txt; echo n > /workspace/fresh.txt; "
                  "mkdir -p /workspace/target/debug && echo t > /workspace/target/debug/bin; echo l > /workspace/run.log; "
                  "cd /workspace && git init -q && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x"},
                 repo_ + "/src");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << runner_->log();
  EXPECT_EQ(read_file(ws() + "/target/cwd"), "/workspace/src\n");  // the same directory, relative to the root
  const auto at = r.out.find("\"type\":\"terminal\"");
  ASSERT_NE(at, std::string::npos) << r.out;
  const auto line_start = r.out.rfind('\n', at);
  const std::string terminal = r.out.substr(line_start == std::string::npos ? 0 : line_start + 1);
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), R"(["f1.txt","f2.txt","fresh.txt"])") << terminal;
  EXPECT_EQ(json_field(terminal, "/untracked_files"), R"({"paths":["fresh.txt"],"truncated":false})");
  EXPECT_EQ(json_field(terminal, "/ignored_writes"), R"({"count":1,"sample_paths":["run.log"]})");
  EXPECT_EQ(json_field(terminal, "/git_state_changed/head_before"), "null");
  EXPECT_EQ(json_field(terminal, "/git_state_changed/ref_after"), "refs/heads/master");
  EXPECT_EQ(json_field(terminal, "/git_state_changed/head_after").size(), 40u);
  EXPECT_EQ(json_field(terminal, "/tree_hash").size(), 40u);
  // Nothing is copied back to the caller; the changes stay for the next job of the key.
  EXPECT_EQ(read_file(repo_ + "/f1.txt"), "line 1\n");
  auto again = motor({"run", "--no-sync", "-w", "k", "--json", "-c", "cat /workspace/fresh.txt"});
  EXPECT_NE(again.out.find("\"workspace_changes\":[\"f1.txt\",\"f2.txt\",\"fresh.txt\"]"), std::string::npos) << again.out;
  // Unchanged since the last job: reported, with equal values (issue 17; null is "not reported").
  const std::string again_terminal = again.out.substr(again.out.rfind('\n', again.out.find("\"type\":\"terminal\"")) + 1);
  EXPECT_EQ(json_field(again_terminal, "/git_state_changed/head_before"),
            json_field(again_terminal, "/git_state_changed/head_after")) << again.out;
  EXPECT_EQ(json_field(again_terminal, "/git_state_changed/head_after").size(), 40u) << again.out;
}

// The .git state the last job left is the baseline of the next job's git_state_changed; it is
// kept in the runner's state dir, so a restart in between does not make a job that touched
// nothing report a change (or a job that did, a change from "absent").
TEST_F(RunnerWorkspace, GitStateBaselineSurvivesARunnerRestart) {
  auto terminal_of = [](const std::string& out) {
    const auto at = out.find("\"type\":\"terminal\"");
    if (at == std::string::npos) return std::string("<no terminal>");
    const auto line_start = out.rfind('\n', at);
    return out.substr(line_start == std::string::npos ? 0 : line_start + 1);
  };
  const std::string commit = "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m ";
  auto first = motor({"run", "-w", "k", "--json", "-c", "cd /workspace && git init -q && " + commit + "one"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err << runner_->log();
  const std::string head = json_field(terminal_of(first.out), "/git_state_changed/head_after");
  ASSERT_EQ(head.size(), 40u) << first.out;

  ASSERT_EQ(runner_->stop(), 0);
  ASSERT_TRUE(runner_->start()) << runner_->log();
  auto untouched = motor({"run", "--no-sync", "-w", "k", "--json", "-c", "true"});
  ASSERT_EQ(untouched.exit_code, 0) << untouched.out << untouched.err;
  // Reported, with the baseline as both values (issue 17: null would mean "not reported").
  EXPECT_EQ(json_field(terminal_of(untouched.out), "/git_state_changed/head_before"), head) << untouched.out;
  EXPECT_EQ(json_field(terminal_of(untouched.out), "/git_state_changed/head_after"), head) << untouched.out;
  auto moved = motor({"run", "--no-sync", "-w", "k", "--json", "-c", "cd /workspace && " + commit + "two"});
  ASSERT_EQ(moved.exit_code, 0) << moved.out << moved.err;
  EXPECT_EQ(json_field(terminal_of(moved.out), "/git_state_changed/head_before"), head) << moved.out;
  // The state dir's record holds it, readable by the runner only.
  struct stat st {};
  ASSERT_EQ(stat((runner_->state_dir() + "/workspace-git/root").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
}

// Polls `check` for up to `seconds`: garbage collection runs in child processes after the
// request that caused it has been answered.
bool eventually(const std::function<bool()>& check, int seconds = 60) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (check()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return check();
}

// Dropping a workspace takes its objects out of the repository's mirror (git gc with the
// remaining workspaces' commits as the only refs); dropping the last one removes the mirror.
TEST_F(RunnerWorkspace, DropCollectsTheMirrorAndTheLastDropRemovesIt) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  sh(repo_, "echo only in k2 > only-k2.txt");
  const std::string blob = sh(repo_, "git hash-object only-k2.txt").substr(0, 40);
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k2"}).exit_code, 0);
  sh(repo_, "rm only-k2.txt");
  const std::string mirrors = runner_->state_dir() + "/mirrors/root";
  const std::string mirror = mirrors + "/" + sh(mirrors, "ls").substr(0, 20);
  auto has = [&](const std::string& object) {
    return run_program({"/usr/bin/git", "-c", "safe.directory=*", "--git-dir=" + mirror, "cat-file", "-e", object}).exit_code == 0;
  };
  ASSERT_TRUE(has(blob));
  const std::string k_tree = sh(repo_, "git rev-parse HEAD^{tree}").substr(0, 40);

  ASSERT_EQ(motor({"workspace", "drop", "k2"}).exit_code, 0);
  EXPECT_TRUE(eventually([&] { return !has(blob); })) << runner_->log();
  EXPECT_TRUE(has(k_tree));
  EXPECT_EQ(sh(mirror, "ls objects/pack | grep -c '\\.pack$'"), "1\n");  // one pack of what k needs
  // k goes on incrementally from its commit, which the collection kept.
  sh(repo_, "echo after gc >> f3.txt");
  auto r = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(r.exit_code, 0) << r.err << runner_->log();
  EXPECT_LT(prepared_bytes(r), 1500) << r.out;
  EXPECT_EQ(read_file(ws() + "/f3.txt"), "line 3\nafter gc\n");

  ASSERT_EQ(motor({"workspace", "drop", "k"}).exit_code, 0);
  EXPECT_TRUE(eventually([&] { return sh(mirrors, "ls -A").empty(); })) << sh(mirrors, "ls -A");
}

// The client's cache repository (~/.cache/motor) is collected in the background once it holds
// more loose objects than git's own gc.auto: what no workspace's last commit reaches goes once
// it is a day old; the next prepare still builds on the runner's commit.
TEST_F(RunnerWorkspace, ClientCacheIsCollectedPastItsLooseObjectBound) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  const std::string repos = base_ + "/cache/motor/repos";
  const std::string cache = repos + "/" + sh(repos, "ls").substr(0, 20);
  // 512 unreachable loose-object files in objects/00..0f, two days old (what many prepares
  // leave behind). Their contents do not matter: the bound counts entries, as git's gc.auto
  // does, and prune removes unreachable loose objects by name and age without reading them.
  sh(cache, "for d in 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f; do mkdir -p objects/$d; "
            "for i in $(seq 10 41); do echo junk > objects/$d/dead00000000000000000000000000000000$i; done; done && "
            "find objects -path '*/[0-9a-f][0-9a-f]/*' -exec touch -d '2 days ago' {} +");
  auto loose = [&] { return std::atoi(sh(cache, "find objects -path '*/[0-9a-f][0-9a-f]/*' -type f | wc -l").c_str()); };
  ASSERT_GE(loose(), 512);
  sh(repo_, "echo edited >> f1.txt");
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  EXPECT_TRUE(eventually([&] { return loose() < 50; })) << loose();
  sh(repo_, "echo again >> f1.txt");
  auto r = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(prepared_bytes(r), 1500) << r.out;
  EXPECT_EQ(read_file(ws() + "/f1.txt"), "line 1\nedited\nagain\n");
}

TEST_F(RunnerWorkspace, DropCancelsARunningJobAndRemovesTheWorkspace) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  RawClient c(runner_->socket());
  c.send_frame(R"({"id":1,"method":"exec.run","params":{"workspace_key":"k","command":"echo up; sleep 60"}})");
  std::string job_id;
  while (auto f = c.read_frame()) {
    if (f->find("\"accepted\"") != std::string::npos) job_id = json_field(*f, "/job_id");
    if (f->find("\"output\"") != std::string::npos) break;
  }
  ASSERT_FALSE(job_id.empty());
  RawClient d(runner_->socket());
  auto r = call_method(d, 1, "workspace.drop", R"({"workspace_key":"k"})");
  EXPECT_EQ(json_field(r, "/result/dropped"), "true") << r;
  EXPECT_EQ(json_field(r, "/result/cancelled_jobs"), "[\"" + job_id + "\"]") << r;
  std::string terminal;
  while (auto f = c.read_frame()) {
    if (f->find("\"terminal\"") != std::string::npos) {
      terminal = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(terminal, "/killed"), "cancel") << terminal;  // it was running: killed
  EXPECT_FALSE(exists(ws()));
  EXPECT_EQ(sh(runner_->state_dir(), "ls workspace-trash | wc -l"), "0\n");
}

// A job owns its workspace and may leave anything in it. Later runner operations on it (the
// changed-paths scan, the next prepare) must not run what a planted .git names, nor write
// through planted symlinks.
TEST_F(RunnerWorkspace, PlantedGitConfigHooksAndSymlinksAreNeverUsed) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "victim"}).exit_code, 0);
  const std::string victim = ws("victim");
  const auto victim_before = snapshot(victim);
  const std::string marker = ws() + "/PWNED";
  // The job: a .git whose config names an fsmonitor, a hooks path and a filter that all write
  // the marker (f3.txt is in its index and stat-dirty, so a status there would run the filter); src/ replaced by a symlink into the victim workspace's host path; f1.txt a
  // symlink to the victim's file.
  const std::string plant = fmt::format(
      "cd /workspace && git init -q && git add f3.txt && printf '#!/bin/sh\\necho $0 >> /workspace/PWNED\\n' > evil.sh && chmod +x evil.sh && "
      "mkdir -p hooks && for h in post-checkout post-index-change pre-commit reference-transaction; do cp evil.sh hooks/$h; done && "
      "git config core.fsmonitor /workspace/evil.sh && git config core.hooksPath /workspace/hooks && "
      "git config filter.x.clean /workspace/evil.sh && git config filter.x.smudge /workspace/evil.sh && "
      "git config filter.x.process /workspace/evil.sh && echo '* filter=x' > .gitattributes && "
      "git config core.sshCommand /workspace/evil.sh && touch -d '2030-01-01' f3.txt && "
      "rm -rf src && ln -s {0} src && rm f1.txt && ln -s {0}/f1.txt f1.txt",
      victim);
  auto job = motor({"run", "--no-sync", "-w", "k", "--json", "-c", plant});
  ASSERT_EQ(job.exit_code, 0) << job.out << job.err;
  EXPECT_NE(job.out.find("\"git_state_changed\":{"), std::string::npos) << job.out;  // the scan read the .git
  EXPECT_FALSE(exists(marker)) << read_file(marker);

  // The caller changes exactly the paths the symlinks stand in for, and prepares again.
  sh(repo_, "echo 'fn main() { new(); }' > src/main.rs && echo rewritten > f1.txt");
  auto r = motor({"workspace", "prepare", "-w", "k"});
  ASSERT_EQ(r.exit_code, 0) << r.err << runner_->log();
  EXPECT_FALSE(exists(marker)) << read_file(marker);
  EXPECT_EQ(snapshot(victim), victim_before);
  struct stat st {};
  ASSERT_EQ(lstat((ws() + "/src").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(read_file(ws() + "/src/main.rs"), "fn main() { new(); }\n");
  ASSERT_EQ(lstat((ws() + "/f1.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(read_file(ws() + "/f1.txt"), "rewritten\n");
  EXPECT_FALSE(exists(ws() + "/.git"));
  EXPECT_FALSE(exists(ws() + "/evil.sh"));
}

// The sandbox git runs in: the workspace, the runner's git dir for it and the mirror, nothing
// else of the host (not the runner's state, not other workspaces), as the job account.
TEST_F(RunnerWorkspace, WorkspaceGitRunsSandboxedAsTheJobAccount) {
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "k"}).exit_code, 0);
  const std::string helper = std::string(MOTOR_RUNNER_BIN).substr(0, std::string(MOTOR_RUNNER_BIN).rfind('/')) +
                             "/motor-workspace-sandbox";
  const std::string meta = runner_->state_dir() + "/workspace-git/root/k";
  auto line = [](std::string s) { return s.substr(0, s.find('\n')); };
  auto r = run_program({helper, "--uid", line(sh("/", "id -u motor-job")), "--gid", line(sh("/", "id -g motor-job")),
                        "--init", MOTOR_INIT_BIN, "--workspace", ws() + ":/workspace", "--rw", meta + ":/meta", "--cwd",
                        "/", "--", "/bin/sh", "-c",
                        fmt::format("id -u; ls {0} 2>&1 | head -1; ls /workspace/f1.txt; ls {1} 2>&1 | head -1",
                                    runner_->state_dir(), runner_->dir())});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string uid, state, own, outside;
  std::getline(lines, uid);
  std::getline(lines, state);
  std::getline(lines, own);
  std::getline(lines, outside);
  EXPECT_EQ(uid + "\n", sh("/", "id -u motor-job"));
  EXPECT_NE(state.find("No such file"), std::string::npos) << state;
  EXPECT_EQ(own, "/workspace/f1.txt");
  EXPECT_NE(outside.find("No such file"), std::string::npos) << outside;
}

}  // namespace
}  // namespace motor::test
