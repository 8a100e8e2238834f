// Issue 17, item 1, through a real runner: exec-remote/v1 callers name a workspace (and its
// siblings) by the canonical path of the checkout on their machine, and a cwd inside it need not
// lie inside repository_root. The runner accepts them, never uses them as paths of its own, and
// keeps them across a restart.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "conformance/wire_test_support.hpp"
#include "protocol/base64.hpp"
#include "support/checkout_fixture.hpp"
#include "workspace/workspace_dir.hpp"

namespace motor::test {
namespace {

class RunnerPathKeys : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override { return "mkdir -p crates/core && echo core > crates/core/lib.rs"; }
  CommandResult motor(const std::vector<std::string>& args) { return runner_->client_in(repo_, args, env_); }
};

TEST_F(RunnerPathKeys, APathKeyIsPreparedListedRunAndKeptAcrossARestart) {
  const std::string key = repo_;  // the caller's canonical path of the checkout
  auto prepared = motor({"workspace", "prepare", "-w", key});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err << runner_->log();
  // The marker of the key is one hashed name holding the key: no path of the caller's on disk.
  const std::string marker = runner_->state_dir() + "/workspaces/.keys/root/" + workspace::workspace_key_file_name(key);
  EXPECT_EQ(read_file(marker), key);
  EXPECT_TRUE(glob_paths(runner_->state_dir() + "/workspace-git/root/*repo*").empty());
  EXPECT_EQ(glob_paths(runner_->state_dir() + "/workspace-git/root/~*.record").size(), 1u);

  // A cwd inside the workspace the key names, while repository_root names another checkout.
  auto frames = run_stream(*runner_, fmt::format(R"({{"workspace_key":{},"repository_root":"/home/u/src/main",)"
                                                 R"("cwd":{},"command":"cat lib.rs && pwd"}})",
                                                 json_quote(key), json_quote(key + "/crates/core")));
  const std::string terminal = last_frame(frames);
  EXPECT_EQ(json_field(terminal, "/outcome/type"), "exit") << terminal;
  EXPECT_EQ(json_field(terminal, "/outcome/code"), "0") << terminal;
  std::string out;
  for (const auto& f : frames) {
    // Each chunk is decoded on its own: the two lines may come in one chunk or in two.
    if (json_field(f, "/type") == "output") out += protocol::base64_decode(json_field(f, "/bytes")).value_or("?");
  }
  EXPECT_EQ(out, "core\n/workspace/crates/core\n");

  ASSERT_EQ(runner_->stop(), 0);
  ASSERT_TRUE(runner_->start()) << runner_->log();
  auto listed = motor({"workspace", "list", "--json"});
  EXPECT_NE(listed.out.find(json_quote(key)), std::string::npos) << listed.out << listed.err;
  // The record came back: the same tree needs no bundle.
  auto again = motor({"workspace", "prepare", "-w", key, "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(json_field(again.out, "/result/bundle_bytes"), "0") << again.out;
}

TEST_F(RunnerPathKeys, PathSiblingsAreMountedUnderSafeNames) {
  const std::string sibling = base_ + "/commons";
  sh(base_, git_init_script("commons") + " && echo shared > shared.txt && git add -A && git commit -qm s");
  ASSERT_EQ(runner_->client_in(sibling, {"workspace", "prepare", "-w", sibling}, env_).exit_code, 0) << runner_->log();
  ASSERT_EQ(motor({"workspace", "prepare", "-w", repo_}).exit_code, 0);
  const std::string mount = "/siblings/" + workspace::workspace_key_file_name(sibling);
  auto frames = run_stream(*runner_, fmt::format(R"({{"workspace_key":{},"repository_root":{},"cwd":{},)"
                                                 R"("siblings":[{}],"command":"cat {}/shared.txt"}})",
                                                 json_quote(repo_), json_quote(repo_), json_quote(repo_),
                                                 json_quote(sibling), mount));
  EXPECT_EQ(json_field(last_frame(frames), "/outcome/code"), "0") << last_frame(frames) << runner_->log();
  // A sibling path that is not canonical is not a key.
  frames = run_stream(*runner_, fmt::format(R"({{"workspace_key":{},"siblings":["/a/../etc"],"command":"true"}})",
                                            json_quote(repo_)));
  EXPECT_EQ(json_field(last_frame(frames), "/outcome/reason"), "workspace_key_rejected") << last_frame(frames);
}

}  // namespace
}  // namespace motor::test
