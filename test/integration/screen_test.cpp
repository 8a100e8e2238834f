// The change screen (issue 24) on real Git repositories with real changes: `motor screen` on
// each rule row and each fail-closed case, and the runner's side: an untrusted workspace whose
// change touches code gets no job run (the canary command never executes).
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "screen/rules.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// A repository with a base commit of docs, code, a manifest and a lockfile; each test commits
// one change on top and screens BASE..HEAD.
class ChangeScreen : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(access("/usr/bin/git", X_OK) == 0, "git is installed by scripts/setup");
    dir_ = make_temp_dir();
    repo_ = dir_ + "/repo";
    sh(dir_, git_init_script("repo") + " && "
             "echo '# Project' > README.md && echo hello > notes.txt && mkdir -p src docs && "
             "echo 'fn main() {}' > src/main.rs && printf '[package]\\nname = \"p\"\\n' > Cargo.toml && "
             "printf 'version = 3\\n' > Cargo.lock && echo guide > docs/guide.md && git add -A && git commit -qm base && "
             "git tag base");
  }
  void TearDown() override { remove_tree(dir_); }

  // Runs `script` in the repository and commits whatever it left.
  void change(const std::string& script) { sh(repo_, script + "\ngit add -A && git commit -q --allow-empty -m change"); }

  struct Screened {
    int exit_code = -1;
    std::string out, err;
    std::string verdict;
    std::map<std::string, std::string> rule_of;  // path -> row id
  };
  Screened screen(const std::vector<std::string>& args = {"base..HEAD"}, const std::string& stdin_file = "") {
    std::vector<std::string> argv = {MOTOR_CLIENT_BIN, "screen", "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = stdin_file.empty()
                          ? run_program(argv, {}, std::chrono::seconds(60), repo_)
                          : run_program({"/bin/sh", "-c", "exec \"$@\" < " + stdin_file, "sh", MOTOR_CLIENT_BIN, "screen", "--json", "--stdin"},
                                        {}, std::chrono::seconds(60), repo_);
    Screened s{r.exit_code, r.out, r.err, "", {}};
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    EXPECT_FALSE(parser.parse(r.out).get(doc)) << "not JSON: " << r.out << r.err;
    std::string_view v;
    if (!doc["verdict"].get_string().get(v)) s.verdict = std::string(v);
    simdjson::dom::array files;
    if (!doc["files"].get_array().get(files)) {
      for (auto f : files) {
        std::string_view path, rule;
        if (!f["path"].get_string().get(path) && !f["rule"].get_string().get(rule)) s.rule_of[std::string(path)] = std::string(rule);
      }
    }
    return s;
  }
  // The change is DO NOT EXECUTE (exit 1) and `path` was refused by `row`.
  void expect_refused(const Screened& s, const std::string& path, const std::string& row) {
    EXPECT_EQ(s.exit_code, 1) << s.out << s.err;
    EXPECT_EQ(s.verdict, "DO NOT EXECUTE") << s.out;
    EXPECT_EQ(s.rule_of.count(path) ? s.rule_of.at(path) : "<not listed>", row) << s.out;
  }

  std::string dir_, repo_;
};

TEST_F(ChangeScreen, DocsOnlyChangeMayExecute) {
  change("echo more >> README.md && echo new > docs/new.rst && echo thanks > AUTHORS && git mv docs/guide.md docs/howto.md");
  auto s = screen();
  EXPECT_EQ(s.exit_code, 0) << s.out << s.err;
  EXPECT_EQ(s.verdict, "MAY EXECUTE");
  EXPECT_EQ(s.rule_of["README.md"], "text_documentation");
  EXPECT_EQ(s.rule_of["docs/new.rst"], "text_documentation");
  EXPECT_EQ(s.rule_of["AUTHORS"], "license_and_notes");
  EXPECT_EQ(s.rule_of["docs/howto.md"], "text_documentation");  // a rename within the row
  // The text form says the same, with one line per file.
  auto text = run_program({MOTOR_CLIENT_BIN, "screen", "base..HEAD"}, {}, std::chrono::seconds(60), repo_);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_TRUE(text.out.starts_with("MAY EXECUTE\n")) << text.out;
}

TEST_F(ChangeScreen, RustEdit) {
  change("echo 'fn evil() {}' >> src/main.rs");
  expect_refused(screen(), "src/main.rs", "source_code");
}

TEST_F(ChangeScreen, NewBuildRs) {
  change("echo 'fn main() { std::process::Command::new(\"sh\"); }' > build.rs");
  expect_refused(screen(), "build.rs", "build_script");
}

TEST_F(ChangeScreen, CargoLockBump) {
  change("printf 'version = 4\\n' > Cargo.lock");
  expect_refused(screen(), "Cargo.lock", "dependency_manifest");
}

TEST_F(ChangeScreen, Workflow) {
  change("mkdir -p .github/workflows && printf 'on: push\\njobs: {}\\n' > .github/workflows/ci.yml");
  expect_refused(screen(), ".github/workflows/ci.yml", "ci_directory");
}

TEST_F(ChangeScreen, TxtTurnedExecutable) {
  change("chmod +x notes.txt");
  expect_refused(screen(), "notes.txt", "mode_change");
}

TEST_F(ChangeScreen, NewExecutableDoc) {
  change("echo text > run-me.md && chmod +x run-me.md");
  expect_refused(screen(), "run-me.md", "executable");
}

TEST_F(ChangeScreen, SymlinkToEtc) {
  change("ln -s /etc etc.md");
  expect_refused(screen(), "etc.md", "symlink");
}

TEST_F(ChangeScreen, BinaryFile) {
  change("printf 'PK\\003\\004\\000\\000binary' > data.txt");
  expect_refused(screen(), "data.txt", "binary");
}

TEST_F(ChangeScreen, ReadmeRenamedToRunSh) {
  change("git mv README.md run.sh");
  expect_refused(screen(), "run.sh", "rename_across_classes");
}

TEST_F(ChangeScreen, GitattributesFilter) {
  change("echo '*.md filter=run-me' > .gitattributes");
  expect_refused(screen(), ".gitattributes", "git_config");
}

TEST_F(ChangeScreen, Submodule) {
  sh(dir_, git_init_script("sub") + " && echo x > x.md && git add -A && git commit -qm sub");
  change("git -c protocol.file.allow=always submodule --quiet add ../sub vendor/sub");
  auto s = screen();
  expect_refused(s, "vendor/sub", "submodule");
  EXPECT_EQ(s.rule_of[".gitmodules"], "git_config");
}

TEST_F(ChangeScreen, PathWithANewline) {
  change("printf 'text\\n' > \"$(printf 'a\\nb.md')\"");
  expect_refused(screen(), "a\nb.md", "control_character");
  auto text = run_program({MOTOR_CLIENT_BIN, "screen", "base..HEAD"}, {}, std::chrono::seconds(60), repo_);
  EXPECT_NE(text.out.find("a\\nb.md"), std::string::npos) << "one line per file: " << text.out;
}

TEST_F(ChangeScreen, ShebangInADoc) {
  change("printf '#!/bin/sh\\nrm -rf ~\\n' > notes.md");
  expect_refused(screen(), "notes.md", "shebang");
}

TEST_F(ChangeScreen, DeletedCode) {
  change("git rm -q src/main.rs");
  expect_refused(screen(), "src/main.rs", "source_code");
}

TEST_F(ChangeScreen, UnknownKind) {
  change("echo '{}' > data.json");
  expect_refused(screen(), "data.json", "unknown");
}

// Every name row of the table, each by a real commit of a path it names.
TEST_F(ChangeScreen, EveryNameRowRefusesOrAllowsAsTheTableSays) {
  for (const auto& row : screen::rules()) {
    if (row.patterns.empty()) continue;
    const std::string p(row.patterns.back());  // (the first of git_hooks is .git, which git never adds)
    std::string path;
    switch (row.match) {
      case screen::Match::kComponent: path = "d/" + p + "/file"; break;
      case screen::Match::kName: path = "d/" + p; break;
      case screen::Match::kNamePrefix: path = "d/" + p + "-x"; break;
      case screen::Match::kExtension: path = "d/file" + p; break;
      default: continue;
    }
    sh(repo_, "git reset -q --hard base");
    change(fmt::format("mkdir -p \"$(dirname '{0}')\" && echo text > '{0}'", path));
    auto s = screen();
    EXPECT_EQ(s.rule_of[path], row.id) << path << "\n" << s.out;
    EXPECT_EQ(s.exit_code, row.verdict == screen::Verdict::kMayExecute ? 0 : 1) << path;
  }
}

TEST_F(ChangeScreen, EmptyChange) {
  change("true");
  auto s = screen();
  EXPECT_EQ(s.exit_code, 1) << s.out;
  EXPECT_EQ(s.verdict, "DO NOT EXECUTE");
  EXPECT_NE(s.out.find("empty_change"), std::string::npos) << s.out;
}

TEST_F(ChangeScreen, EmptyDiffFile) {
  write_file(dir_ + "/empty.diff", "");
  auto s = screen({"--diff", dir_ + "/empty.diff"});
  EXPECT_EQ(s.exit_code, 1) << s.out;
  EXPECT_EQ(s.verdict, "DO NOT EXECUTE");
}

TEST_F(ChangeScreen, UnreadableOrMalformedDiffIsAnError) {
  auto missing = screen({"--diff", dir_ + "/no-such.diff"});
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_EQ(missing.verdict, "DO NOT EXECUTE");
  // A unified diff is not git's raw format: the screen does not parse patches.
  change("echo more >> README.md");
  sh(repo_, "git diff base HEAD > ../patch.diff");
  auto patch = screen({"--diff", dir_ + "/patch.diff"});
  EXPECT_EQ(patch.exit_code, 2) << patch.out;
  EXPECT_EQ(patch.verdict, "DO NOT EXECUTE");
  // A raw diff without --numstat cannot say which files are binary.
  sh(repo_, "git diff --raw -z -M base HEAD > ../raw-only.diff");
  EXPECT_EQ(screen({"--diff", dir_ + "/raw-only.diff"}).exit_code, 2);
  // The text form says an error means DO NOT EXECUTE.
  auto text = run_program({MOTOR_CLIENT_BIN, "screen", "--diff", dir_ + "/no-such.diff"}, {}, std::chrono::seconds(60), repo_);
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_TRUE(text.out.starts_with("DO NOT EXECUTE\n")) << text.out;
  // Not a revision, and no change named at all.
  EXPECT_EQ(screen({"nope..HEAD"}).exit_code, 2);
  EXPECT_EQ(run_program({MOTOR_CLIENT_BIN, "screen"}, {}, std::chrono::seconds(60), repo_).exit_code, 2);
}

TEST_F(ChangeScreen, DiffFileAndStdinGiveTheSameVerdictAsTheRange) {
  change("echo more >> README.md && printf '#!/bin/sh\\n' > hidden.txt");
  sh(repo_, "git diff --raw --numstat -z -M base HEAD > ../change.diff");
  for (const auto& s : {screen({"--diff", dir_ + "/change.diff"}), screen({}, dir_ + "/change.diff")}) {
    expect_refused(s, "hidden.txt", "shebang");  // the blob is read from the checkout's objects
    EXPECT_EQ(s.rule_of.at("README.md"), "text_documentation");
  }
  sh(repo_, "git reset -q --hard base");
  change("echo more >> README.md");
  sh(repo_, "git diff --raw --numstat -z -M base HEAD > ../docs.diff");
  EXPECT_EQ(screen({"--diff", dir_ + "/docs.diff"}).exit_code, 0);
}

// The runner's side: untrusted workspaces.
class ChangeScreenRunner : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
    MOTOR_REQUIRE(access("/usr/bin/git", X_OK) == 0, "git is installed by scripts/setup");
    dir_ = make_temp_dir();
    repo_ = dir_ + "/repo";
    env_ = {"XDG_CACHE_HOME=" + dir_ + "/cache"};
    sh(dir_, git_init_script("repo") + " && "
             "echo '# Project' > README.md && mkdir -p src && echo 'fn main() {}' > src/main.rs && "
             "git add -A && git commit -qm base");
    runner_ = std::make_unique<RunnerProcess>();
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override {
    runner_.reset();
    remove_tree(dir_);
  }
  CommandResult motor(const std::vector<std::string>& args) { return runner_->client_in(repo_, args, env_); }
  // exec.run with untrusted: true on a raw connection; the terminal record.
  std::string run_untrusted_raw(const std::string& key, const std::string& command) {
    RawClient c(runner_->socket());
    EXPECT_TRUE(c.connected());
    EXPECT_TRUE(c.send_frame(fmt::format(R"({{"id":1,"method":"exec.run","params":{{"workspace_key":"{}","untrusted":true,"command":{}}}}})",
                                         key, json_quote(command))));
    for (;;) {
      auto f = c.read_frame(std::chrono::milliseconds(60000));
      if (!f) return "<no terminal>";
      if (json_field(*f, "/type") == "terminal" || json_field(*f, "/error") != "<missing>") return *f;
    }
  }
  std::string canary(const std::string& key) { return runner_->workspace(key) + "/canary"; }

  std::string dir_, repo_;
  std::vector<std::string> env_;
  std::unique_ptr<RunnerProcess> runner_;
};

TEST_F(ChangeScreenRunner, UntrustedCodeChangeGetsNoJob) {
  sh(repo_, "echo 'fn evil() {}' >> src/main.rs && echo more >> README.md");  // uncommitted: the work tree is the change
  auto r = motor({"run", "--untrusted", "-w", "code", "--", "/bin/sh", "-c", "echo ran > /workspace/canary"});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("screen_refused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("src/main.rs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[source_code]"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(canary("code"))) << "the canary ran";
  EXPECT_FALSE(exists(runner_->workspace("code") + "/src/main.rs")) << "the refused change was checked out";
  // The job submitted on its own is refused too: the workspace holds no screened change.
  const std::string t = run_untrusted_raw("code", "echo ran > /workspace/canary");
  EXPECT_EQ(json_field(t, "/outcome/reason"), "screen_refused") << t;
  EXPECT_FALSE(exists(canary("code"))) << "the canary ran";
}

TEST_F(ChangeScreenRunner, UntrustedCommittedCodeChangeFromItsBaseGetsNoJob) {
  sh(repo_, "echo 'fn evil() {}' >> src/main.rs && git commit -qam 'the pull request'");
  auto r = motor({"workspace", "prepare", "--untrusted", "--base", "HEAD~1", "-w", "pr"});
  EXPECT_EQ(r.exit_code, 69) << r.out << r.err;
  EXPECT_NE(r.err.find("[source_code]"), std::string::npos) << r.err;
  const std::string t = run_untrusted_raw("pr", "echo ran > /workspace/canary");
  EXPECT_EQ(json_field(t, "/outcome/reason"), "screen_refused") << t;
  EXPECT_FALSE(exists(canary("pr"))) << "the canary ran";
}

TEST_F(ChangeScreenRunner, UntrustedDocsChangeRuns) {
  sh(repo_, "echo more >> README.md");
  auto r = motor({"run", "--untrusted", "-w", "docs", "--", "/bin/sh", "-c", "echo ran > /workspace/canary"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << runner_->log();
  EXPECT_TRUE(exists(canary("docs")));
  // The same tree again: no bundle, and still screened.
  auto again = motor({"run", "--untrusted", "-w", "docs", "--", "/bin/true"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  // A sibling whose contents were never screened is refused like the workspace itself.
  ASSERT_EQ(motor({"workspace", "prepare", "-w", "plain"}).exit_code, 0);
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"workspace_key":"docs","untrusted":true,)"
                           R"("siblings":["plain"],"command":"echo ran > /workspace/sibling-canary"}})"));
  std::string t;
  while (json_field(t, "/type") != "terminal") {
    auto f = c.read_frame(std::chrono::milliseconds(60000));
    ASSERT_TRUE(f.has_value());
    t = *f;
  }
  EXPECT_EQ(json_field(t, "/outcome/reason"), "screen_refused") << t;
  EXPECT_NE(json_field(t, "/refusal_detail").find("workspace \"plain\""), std::string::npos) << t;
  EXPECT_FALSE(exists(runner_->workspace("docs") + "/sibling-canary"));
}

TEST_F(ChangeScreenRunner, UntrustedRunOnAWorkspaceThatWasNotScreenedIsRefused) {
  sh(repo_, "echo 'fn evil() {}' >> src/main.rs");
  auto prepared = motor({"workspace", "prepare", "-w", "plain"});  // trusted: not screened
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err;
  const std::string t = run_untrusted_raw("plain", "echo ran > /workspace/canary");
  EXPECT_EQ(json_field(t, "/outcome/reason"), "screen_refused") << t;
  EXPECT_NE(json_field(t, "/refusal_detail").find("not prepared as untrusted"), std::string::npos) << t;
  EXPECT_FALSE(exists(canary("plain"))) << "the canary ran";
  // A docs-only untrusted prepare of that workspace would pass; a code change stays refused.
  auto r = motor({"workspace", "prepare", "--untrusted", "-w", "plain"});
  EXPECT_EQ(r.exit_code, 69) << r.err;
  EXPECT_EQ(json_field(run_untrusted_raw("plain", "true"), "/outcome/reason"), "screen_refused");
}

}  // namespace
}  // namespace motor::test
