// Workspace keys and the job's working directory: nothing a caller sends may name a path
// outside its own workspace.
#include "workspace/workspace_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <string>

namespace motor::workspace {
namespace {

using namespace std::string_literals;

void expect_rejected(std::string_view key) {
  auto s = validate_workspace_key(key);
  ASSERT_FALSE(s.ok()) << "accepted: \"" << key << "\"";
  EXPECT_EQ(s.error().code, "workspace_key_rejected");
}

TEST(WorkspaceKey, Accepted) {
  for (const char* key : {"default", "a", "ws-1", "feature_x", "v1.2.3", "A-Z_a-z.0-9"}) {
    EXPECT_TRUE(validate_workspace_key(key).ok()) << key;
  }
  EXPECT_TRUE(validate_workspace_key(std::string(128, 'k')).ok());
}

TEST(WorkspaceKey, Rejected) {
  expect_rejected("");
  expect_rejected(".");
  expect_rejected("..");
  expect_rejected(".hidden");
  expect_rejected("a/b");
  expect_rejected("a\\b");
  expect_rejected("a\0b"s);
  expect_rejected("\0"s);
  expect_rejected(std::string(129, 'k'));
  expect_rejected("a b");
  expect_rejected("a@b");  // '@' is for caller names, not keys
  expect_rejected("caf\xC3\xA9");
  expect_rejected("a\nb");
}

// Issue 17: exec-remote/v1 callers name a workspace by the canonical absolute path of its checkout.
TEST(WorkspaceKey, CanonicalPathsAreKeys) {
  for (const char* key : {"/home/u/worktrees/task", "/Users/example/src/prefrontal", "/", "/a", "/a b/c@d/caf\xC3\xA9"}) {
    EXPECT_TRUE(validate_workspace_key(key).ok()) << key;
    EXPECT_TRUE(is_path_key(key)) << key;
  }
  EXPECT_TRUE(validate_workspace_key("/" + std::string(4095, 'p')).ok());
  EXPECT_FALSE(is_path_key("default"));
}

TEST(WorkspaceKey, PathsThatAreNotCanonicalAreRejected) {
  for (const char* key : {"/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/..", "/.", "/a/.", "/a\nb", "/a\tb", "/a\x7f"}) {
    expect_rejected(key);
  }
  expect_rejected("/a\0b"s);
  expect_rejected("/" + std::string(4096, 'p'));
}

TEST(WorkspaceKey, OnDiskNameOfAPathIsOneSafeComponent) {
  EXPECT_EQ(workspace_key_file_name("default"), "default");  // Motor's short keys keep their names
  const std::string name = workspace_key_file_name("/home/u/worktrees/task");
  EXPECT_EQ(name.size(), 41u);
  EXPECT_EQ(name[0], '~');
  EXPECT_EQ(name.find('/'), std::string::npos);
  EXPECT_TRUE(is_path_key_file_name(name));
  EXPECT_TRUE(is_workspace_key_file_name(name));
  EXPECT_TRUE(is_workspace_key_file_name("default"));
  EXPECT_FALSE(is_workspace_key_file_name(".."));
  EXPECT_FALSE(validate_workspace_key(name).ok());  // a hashed name is not itself a key
  EXPECT_NE(name, workspace_key_file_name("/home/u/worktrees/task2"));
  EXPECT_EQ(name, workspace_key_file_name("/home/u/worktrees/task"));
}

// A hashed name is believed only for the key that hashes to it.
TEST(WorkspaceKey, AHashedNameNamesOnlyItsOwnKey) {
  const std::string key = "/home/u/worktrees/task";
  const std::string name = workspace_key_file_name(key);
  EXPECT_EQ(key_named(name, key), std::optional<std::string>(key));
  EXPECT_EQ(key_named(name, "/home/u/worktrees/other"), std::nullopt);
  EXPECT_EQ(key_named(name, ""), std::nullopt);
  EXPECT_EQ(key_named("default", "anything"), std::optional<std::string>("default"));
  EXPECT_EQ(key_named("..", ".."), std::nullopt);
  EXPECT_EQ(key_named(".keys", ""), std::nullopt);
}

TEST(WorkspaceKey, MessageSaysWhatAKeyIs) {
  auto s = validate_workspace_key("..");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("1 to 128"), std::string::npos) << s.error().message;
}

std::string rel(std::string_view root, std::string_view cwd) {
  auto r = relative_cwd(root, cwd);
  EXPECT_TRUE(r.ok()) << root << " + " << cwd << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : "<error>";
}

void expect_refused(std::string_view root, std::string_view cwd, std::string_view fragment) {
  auto r = relative_cwd(root, cwd);
  ASSERT_FALSE(r.ok()) << root << " + " << cwd << " gave \"" << *r << "\"";
  EXPECT_EQ(r.error().code, "bad_request");
  EXPECT_NE(r.error().message.find(fragment), std::string::npos) << r.error().message;
}

TEST(RelativeCwd, AbsoluteUnderRoot) {
  EXPECT_EQ(rel("/home/a/repo", "/home/a/repo/src/lib"), "src/lib");
  EXPECT_EQ(rel("/home/a/repo", "/home/a/repo"), "");
  EXPECT_EQ(rel("/home/a/repo", "/home/a/repo/"), "");
  EXPECT_EQ(rel("/home/a/repo/", "/home/a/repo/src"), "src");
  EXPECT_EQ(rel("/home/a/repo//", "/home/a/repo/src"), "src");
  EXPECT_EQ(rel("/home/a/repo", "/home/a/repo//src/./x/"), "src/x");
  EXPECT_EQ(rel("/", "/etc/x"), "etc/x");
}

TEST(RelativeCwd, AbsoluteOutsideRoot) {
  expect_refused("/home/a/repo", "/home/a/other", "is not inside repository_root");
  expect_refused("/home/a/repo", "/home/a/repository", "is not inside repository_root");  // a prefix, not a parent
  expect_refused("/home/a/repo", "/home/a", "is not inside repository_root");
  expect_refused("/home/a/repo", "/etc", "is not inside repository_root");
  expect_refused("", "/home/a/repo", "is not inside repository_root");           // no root to be under
  expect_refused("home/a/repo", "/home/a/repo", "is not inside repository_root");  // a relative root
}

// Issue 17: a path key's cwd is inside the workspace the key names, not inside repository_root
// (a git worktree lives elsewhere).
TEST(RelativeCwd, InsideAPathKeysWorkspace) {
  const std::string key = "/home/u/worktrees/task", root = "/home/u/src/repo";
  EXPECT_EQ(cwd_checkout(key, root), key);
  EXPECT_EQ(cwd_checkout("default", root), root);
  EXPECT_EQ(rel(cwd_checkout(key, root), "/home/u/worktrees/task/crates/core"), "crates/core");
  EXPECT_EQ(rel(cwd_checkout(key, root), "/home/u/worktrees/task"), "");
  auto outside = relative_cwd(cwd_checkout(key, root), "/home/u/src/repo/x", "the workspace (workspace_key)");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.error().message.find("is not inside the workspace"), std::string::npos) << outside.error().message;
}

TEST(RelativeCwd, DotDotIsRefused) {
  expect_refused("/r", "..", "may not contain \"..\"");
  expect_refused("/r", "a/../b", "may not contain \"..\"");
  expect_refused("/r", "a/..", "may not contain \"..\"");
  expect_refused("/r", "/r/../etc", "may not contain \"..\"");
  expect_refused("/r", "../../etc/passwd", "may not contain \"..\"");
}

TEST(RelativeCwd, DotsThatAreNotDotDot) {
  EXPECT_EQ(rel("/r", "..."), "...");
  EXPECT_EQ(rel("/r", "..a"), "..a");
  EXPECT_EQ(rel("/r", ".git"), ".git");
}

TEST(RelativeCwd, DotAndEmpty) {
  EXPECT_EQ(rel("/r", ""), "");
  EXPECT_EQ(rel("/r", "."), "");
  EXPECT_EQ(rel("/r", "./"), "");
  EXPECT_EQ(rel("/r", "./a/./b"), "a/b");
  EXPECT_EQ(rel("", "src"), "src");  // a relative cwd needs no root
}

// Issue 15 item 6: the cwd is resolved inside the workspace only. A symlink the job planted to a
// host directory that exists answers exactly like one to a path that does not.
TEST(CheckDirBeneath, NoSymlinkNoEscapeOneAnswer) {
  char tmpl[] = "/tmp/motor-cwd-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string ws = tmpl;
  ASSERT_EQ(mkdir((ws + "/src").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((ws + "/src/deep").c_str(), 0755), 0);
  ASSERT_EQ(symlink("/tmp", (ws + "/to-host").c_str()), 0);
  ASSERT_EQ(symlink("/nonexistent-motor-cwd", (ws + "/to-nothing").c_str()), 0);
  ASSERT_EQ(symlink("src", (ws + "/to-src").c_str()), 0);
  EXPECT_TRUE(check_dir_beneath(ws, ""));
  EXPECT_TRUE(check_dir_beneath(ws, "src"));
  EXPECT_TRUE(check_dir_beneath(ws, "src/deep"));
  auto answer = [&](const std::string& rel) {
    auto st = check_dir_beneath(ws, rel);
    if (st) return std::string("ok");
    std::string m = st.error().code + ": " + st.error().message;
    const auto at = m.find(rel);
    return at == std::string::npos ? m : m.replace(at, rel.size(), "NAME");
  };
  EXPECT_NE(answer("to-host"), "ok");
  EXPECT_EQ(answer("to-host"), answer("to-nothing"));
  EXPECT_EQ(answer("to-host"), answer("missing"));
  EXPECT_EQ(answer("to-src"), answer("missing"));   // even a link inside the workspace
  EXPECT_EQ(answer("to-host/x"), answer("missing/x"));
  for (const char* p : {"/to-host", "/to-nothing", "/to-src", "/src/deep", "/src", ""}) {
    const std::string path = ws + p;
    if (*p) (void)(unlink(path.c_str()) == 0 || rmdir(path.c_str()) == 0);
  }
  rmdir(ws.c_str());
}

}  // namespace
}  // namespace motor::workspace
