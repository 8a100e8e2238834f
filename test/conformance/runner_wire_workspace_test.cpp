// Issue 17 through a real runner, in a prepared workspace: exec-remote/v1's prepare (items 2 and
// 5), the git_state_changed report (10) and what a job lost in a crash still reports (12).
#include <gtest/gtest.h>

#include "conformance/vocabulary.hpp"
#include "conformance/wire_test_support.hpp"
#include "protocol/messages.hpp"
#include "support/checkout_fixture.hpp"

namespace motor::test {
namespace {

using namespace vocabulary;

class RunnerWireWorkspace : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override { return "echo one > a.txt"; }
  std::string prepare_params(const std::string& key, const std::string& base_commit) const {
    return fmt::format(R"({{"workspace_key":{},"repository_root":{},"base_commit":"{}","siblings":[]}})", json_quote(key),
                       json_quote(repo_), base_commit);
  }
  std::string head() const { return sh(repo_, "git rev-parse HEAD").substr(0, 40); }
};

// 2 and 5: the vocabulary's prepare {workspace_key, repository_root, base_commit, siblings}.
TEST_F(RunnerWireWorkspace, PrepareWithBaseCommitIsAnsweredAsTheVocabularyDefinesIt) {
  RawClient c(runner_->socket());
  // No snapshot of it yet: refused (snapshot_failed), with a transfer_id as every reply has.
  std::string r = call_method(c, 1, "workspace.prepare", prepare_params(repo_, head()));
  EXPECT_EQ(json_field(r, "/result/outcome/reason"), "snapshot_failed") << r;
  EXPECT_TRUE(protocol::is_job_id(json_field(r, "/result/transfer_id"))) << r;
  EXPECT_EQ(shape_difference(json_field(r, "/result"), fixture("replies", "prepare-refused-snapshot_failed"),
                             {"transfer_id", "outcome", "retry_after_ms"}),
            "") << r;
  // Once a bundle brought a commit (Motor's client, under another key: it sends a commit of its
  // own of the checkout's files), a prepare of a new workspace to it needs none: prepared, and
  // the files are there.
  auto bundled = runner_->client_in(repo_, {"workspace", "prepare", "-w", "motor-key", "--json"}, env_);
  ASSERT_EQ(bundled.exit_code, 0) << runner_->log();
  const std::string commit = json_field(bundled.out, "/result/commit");
  ASSERT_TRUE(protocol::is_object_id(commit)) << bundled.out;
  r = call_method(c, 2, "workspace.prepare", prepare_params(repo_, commit));
  EXPECT_EQ(shape_difference(json_field(r, "/result"), fixture("replies", "prepare-prepared"), kPrepareReplyFields), "")
      << r << runner_->log();
  EXPECT_EQ(read_file(runner_->workspace(repo_) + "/a.txt"), "one\n");
  // A key that is no key: refused, and still with a UUID transfer_id and no null hints.
  r = call_method(c, 3, "workspace.prepare", prepare_params("/a/../b", head()));
  EXPECT_EQ(shape_difference(json_field(r, "/result"), fixture("replies", "prepare-refused-workspace_key_rejected"),
                             {"transfer_id", "outcome", "retry_after_ms"}),
            "") << r;
  EXPECT_NE(json_field(r, "/result/refusal_detail"), "null") << r;
  EXPECT_TRUE(protocol::is_job_id(json_field(r, "/result/transfer_id"))) << r;
}

// A prepare to a commit holds the mirror until its checkout has answered: the drop of the only
// workspace that named the commit, sent while the prepare looks the commit up, would otherwise
// collect the mirror (no record names a commit of it) and the prepare find nothing.
TEST_F(RunnerWireWorkspace, APrepareToACommitKeepsItsMirrorWhileAnotherWorkspaceOfItIsDropped) {
  auto bundled = runner_->client_in(repo_, {"workspace", "prepare", "-w", "motor-key", "--json"}, env_);
  ASSERT_EQ(bundled.exit_code, 0) << runner_->log();
  const std::string commit = json_field(bundled.out, "/result/commit");
  ASSERT_TRUE(protocol::is_object_id(commit)) << bundled.out;
  RawClient preparing(runner_->socket());
  RawClient dropping(runner_->socket());
  ASSERT_TRUE(preparing.send_frame(
      fmt::format(R"({{"id":1,"method":"workspace.prepare","params":{}}})", prepare_params(repo_, commit))));
  const std::string dropped = call_method(dropping, 2, "workspace.drop", R"({"workspace_key":"motor-key"})");
  EXPECT_EQ(json_field(dropped, "/error"), "<missing>") << dropped;
  std::string r;
  while (auto f = preparing.read_frame()) {
    if (json_field(*f, "/id") == "1") {
      r = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(r, "/result/outcome/type"), "prepared") << r << runner_->log();
  EXPECT_EQ(read_file(runner_->workspace(repo_) + "/a.txt"), "one\n");
}

// 10: in a prepared workspace a job that changed nothing reports git_state_changed with equal
// values (and the other two reports), never null.
TEST_F(RunnerWireWorkspace, AJobThatChangedNothingReportsItsGitState) {
  ASSERT_EQ(runner_->client_in(repo_, {"workspace", "prepare", "-w", "k"}, env_).exit_code, 0) << runner_->log();
  auto frames = run_stream(*runner_, R"({"workspace_key":"k","command":"cat a.txt"})");
  const std::string terminal = last_frame(frames);
  EXPECT_EQ(canonical(json_field(terminal, "/git_state_changed")),
            canonical(R"({"head_before":null,"head_after":null,"ref_before":null,"ref_after":null,"index_tree_before":null,)"
                      R"("index_tree_after":null,"stash_count_before":0,"stash_count_after":0})"))
      << terminal;
  EXPECT_EQ(shape_difference(terminal, fixture("records", "terminal-prepared-workspace"), kTerminalFields), "") << terminal;
}

// 12: a job running in a prepared workspace when the runner died keeps its tree_hash and what
// it changed there after the restart.
TEST_F(RunnerWireWorkspace, AJobLostInACrashKeepsItsTreeHashAndWorkspaceChanges) {
  ASSERT_EQ(runner_->client_in(repo_, {"workspace", "prepare", "-w", "k"}, env_).exit_code, 0) << runner_->log();
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"workspace_key":"k","command":"echo two > b.txt && echo go && sleep 600"}})"));
  std::string job_id;
  for (std::optional<std::string> f; (f = c.read_frame()) && json_field(*f, "/type") != "output";) {
    if (json_field(*f, "/type") == "accepted") job_id = json_field(*f, "/job_id");
  }
  ASSERT_FALSE(job_id.empty());
  const std::string terminal = terminal_after_a_crash(*runner_, job_id);
  EXPECT_EQ(json_field(terminal, "/outcome/type"), "outcome_unknown") << terminal;
  EXPECT_EQ(json_field(terminal, "/tree_hash"), sh(repo_, "git rev-parse HEAD^{tree}").substr(0, 40)) << terminal;
  EXPECT_EQ(json_field(terminal, "/workspace_changes"), R"(["b.txt"])") << terminal << runner_->log();
  EXPECT_EQ(shape_difference(terminal, fixture("records", "terminal-outcome_unknown"),
                             {"type", "job_id", "outcome", "wall_ms", "queue_wait_ms", "bundle_bytes", "ran", "tree_hash",
                              "workspace_changes"}),
            "") << terminal;
}

}  // namespace
}  // namespace motor::test
