// Which caller environment variables reach a job: each rule by a line and an assertion.
#include "config/env_filter.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace motor::config {
namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;
using Names = std::vector<std::string>;

const Names kNoList;

bool forwarded(const EnvFilterResult& r, const std::string& name) {
  return std::any_of(r.forwarded.begin(), r.forwarded.end(),
                     [&](const auto& kv) { return kv.first == name; });
}

bool dropped(const EnvFilterResult& r, const std::string& name) {
  return std::find(r.not_forwarded.begin(), r.not_forwarded.end(), name) !=
         r.not_forwarded.end();
}

bool passes(const std::string& name, const Names& list = kNoList) {
  auto r = filter_env({{name, "v"}}, list);
  EXPECT_NE(forwarded(r, name), dropped(r, name)) << name;  // exactly one of the two
  return forwarded(r, name);
}

TEST(EnvFilter, BuildVariablesCrossByDefault) {
  EXPECT_TRUE(passes("RUST_LOG"));
  EXPECT_TRUE(passes("RUST_BACKTRACE"));
  EXPECT_TRUE(passes("CARGO_TARGET_DIR"));
  EXPECT_TRUE(passes("NEXTEST_PROFILE"));
  EXPECT_TRUE(passes("RUSTFLAGS"));
  EXPECT_TRUE(passes("RUSTDOCFLAGS"));
  EXPECT_TRUE(passes("LC_ALL"));
  EXPECT_TRUE(passes("LC_MESSAGES"));
}

TEST(EnvFilter, OtherNamesNeedTheAllowList) {
  EXPECT_FALSE(passes("CC"));
  EXPECT_TRUE(passes("CC", {"CC"}));
  EXPECT_FALSE(passes("CCX", {"CC"}));    // exact names, not prefixes
  EXPECT_FALSE(passes("cc", {"CC"}));     // case matters
  EXPECT_FALSE(passes("RUST"));           // the prefix needs its underscore
  EXPECT_FALSE(passes("RUSTFLAGS_X"));
  EXPECT_FALSE(passes("MY_RUST_X"));
  EXPECT_TRUE(passes("MY_BUILD_OPT", {"MY_BUILD_*"}));  // a trailing '*' is a prefix
  EXPECT_FALSE(passes("MY_OTHER", {"MY_BUILD_*"}));
  EXPECT_FALSE(passes("HOSTNAME"));
  EXPECT_FALSE(passes("LD_PRELOAD"));
}

TEST(EnvFilter, SecretWordsDroppedWhateverTheList) {
  Names list = {"GH_TOKEN", "MY_SECRET_VALUE", "API_KEY", "DB_PASSWORD", "AWS_CREDENTIALS"};
  EXPECT_FALSE(passes("GH_TOKEN", list));
  EXPECT_FALSE(passes("MY_SECRET_VALUE", list));
  EXPECT_FALSE(passes("API_KEY", list));
  EXPECT_FALSE(passes("DB_PASSWORD", list));
  EXPECT_FALSE(passes("AWS_CREDENTIALS", list));
  EXPECT_FALSE(passes("CARGO_REGISTRY_TOKEN"));         // even under a forwarded prefix
  EXPECT_FALSE(passes("RUST_SECRET"));
  EXPECT_FALSE(passes("github_token", {"github_token"}));  // any case
  EXPECT_FALSE(passes("Api_Key", {"Api_*"}));
  EXPECT_FALSE(passes("CARGO_KEYRING"));                // KEY anywhere in the name
  EXPECT_FALSE(passes("AWS_ACCESS_KEY_ID", {"AWS_*"}));
}

TEST(EnvFilter, SshAuthSockNeverCrosses) {
  EXPECT_FALSE(passes("SSH_AUTH_SOCK", {"SSH_AUTH_SOCK"}));
  EXPECT_FALSE(passes("SSH_AUTH_SOCK", {"SSH_*"}));
}

TEST(EnvFilter, RunnerOwnedNamesNeverCross) {
  for (const char* name : {"PATH", "HOME", "USER", "LOGNAME"}) {
    EXPECT_FALSE(passes(name, {name})) << name;
  }
  EXPECT_TRUE(passes("LANG", {"LANG"}));  // LANG may be overridden
}

TEST(EnvFilter, InvalidNamesDroppedAndListed) {
  auto r = filter_env({{"", "v"}}, {""});
  EXPECT_TRUE(r.forwarded.empty());
  EXPECT_EQ(r.not_forwarded, Names{"(empty name)"});

  r = filter_env({{"RUST_A=B", "v"}}, kNoList);
  EXPECT_TRUE(r.forwarded.empty());
  EXPECT_EQ(r.not_forwarded, Names{"RUST_A..."});  // nothing after '=' is shown

  r = filter_env({{std::string("RUST_A\0B", 8), "v"}}, kNoList);
  EXPECT_TRUE(r.forwarded.empty());
  EXPECT_EQ(r.not_forwarded, Names{"RUST_A..."});

  std::string longest = "RUST_" + std::string(kMaxEnvNameBytes - 5, 'X');
  EXPECT_TRUE(passes(longest));
  std::string too_long = longest + "X";
  r = filter_env({{too_long, "v"}}, kNoList);
  EXPECT_TRUE(r.forwarded.empty());
  ASSERT_EQ(r.not_forwarded.size(), 1u);
  EXPECT_EQ(r.not_forwarded[0], longest + "...");
}

TEST(EnvFilter, LongInvalidNameCutOnCharacterBoundary) {
  std::string name = "RUST_" + std::string(kMaxEnvNameBytes - 6, 'X') + "\xC3\xA9";  // é spans 256
  auto r = filter_env({{name, "v"}}, kNoList);
  ASSERT_EQ(r.not_forwarded.size(), 1u);
  EXPECT_EQ(r.not_forwarded[0], name.substr(0, kMaxEnvNameBytes - 1) + "...");
}

TEST(EnvFilter, ValueWithNulDroppedAndNamed) {
  auto r = filter_env({{"RUST_LOG", std::string("a\0b", 3)}}, kNoList);
  EXPECT_TRUE(r.forwarded.empty());
  EXPECT_EQ(r.not_forwarded, Names{"RUST_LOG"});
}

TEST(EnvFilter, CanariesDroppedNamedAndValuesNeverShown) {
  Vars req = {{"GH_TOKEN", "canary-gh-ghp_1234"},
              {"MY_SECRET_VALUE", "canary-secret-5678"},
              {"API_KEY", "canary-api-9abc"},
              {"AWS_ACCESS_KEY_ID", "canary-aws-AKIA"},
              {"SSH_AUTH_SOCK", "/tmp/ssh-canary/agent.1"},
              {"RUST_LOG", "debug"},
              {"CARGO_TERM_COLOR", "always"}};
  Names list = {"GH_TOKEN", "MY_SECRET_VALUE", "API_KEY", "AWS_ACCESS_KEY_ID", "SSH_AUTH_SOCK"};
  auto r = filter_env(req, list);
  EXPECT_EQ(r.forwarded, (Vars{{"CARGO_TERM_COLOR", "always"}, {"RUST_LOG", "debug"}}));
  EXPECT_EQ(r.not_forwarded, (Names{"API_KEY", "AWS_ACCESS_KEY_ID", "GH_TOKEN",
                                    "MY_SECRET_VALUE", "SSH_AUTH_SOCK"}));
  for (const std::string& name : r.not_forwarded) {
    EXPECT_EQ(name.find("canary"), std::string::npos) << name;
  }
  for (const auto& [name, value] : r.forwarded) {
    EXPECT_EQ(value.find("canary"), std::string::npos) << name;
  }
}

TEST(EnvFilter, ValuesNeverInNotForwardedEvenForBadNames) {
  auto r = filter_env({{"GH_TOKEN=ghp_canary", "x"}, {"X", "ghp_canary2"}}, kNoList);
  EXPECT_TRUE(r.forwarded.empty());
  for (const std::string& name : r.not_forwarded) {
    EXPECT_EQ(name.find("canary"), std::string::npos) << name;
  }
  EXPECT_EQ(r.not_forwarded, (Names{"GH_TOKEN...", "X"}));
}

TEST(EnvFilter, NotForwardedSortedAndDeduplicated) {
  auto r = filter_env({{"ZED", "1"}, {"GH_TOKEN", "a"}, {"ZED", "2"}, {"ALPHA", "3"}}, kNoList);
  EXPECT_EQ(r.not_forwarded, (Names{"ALPHA", "GH_TOKEN", "ZED"}));
}

TEST(EnvFilter, ForwardedSortedOneValuePerName) {
  auto r = filter_env({{"RUST_B", "1"}, {"RUST_A", "2"}, {"RUST_B", "3"}}, kNoList);
  EXPECT_EQ(r.forwarded, (Vars{{"RUST_A", "2"}, {"RUST_B", "3"}}));
  EXPECT_TRUE(r.not_forwarded.empty());
}

TEST(EnvFilter, EmptyRequest) {
  auto r = filter_env({}, {"CC"});
  EXPECT_TRUE(r.forwarded.empty());
  EXPECT_TRUE(r.not_forwarded.empty());
}

TEST(EnvFilter, ValuesForwardedVerbatim) {
  auto r = filter_env({{"RUSTFLAGS", "-C target-cpu=native  =x\n"}, {"CARGO_X", ""}}, kNoList);
  EXPECT_EQ(r.forwarded, (Vars{{"CARGO_X", ""}, {"RUSTFLAGS", "-C target-cpu=native  =x\n"}}));
}

TEST(EnvFilter, NeverForwardedReason) {
  EXPECT_EQ(never_forwarded_reason("CC"), "");
  EXPECT_EQ(never_forwarded_reason("GH_TOKEN"), "name contains TOKEN");
  EXPECT_EQ(never_forwarded_reason("my_password"), "name contains PASSWORD");
  EXPECT_EQ(never_forwarded_reason("SSH_AUTH_SOCK"), "SSH_AUTH_SOCK never crosses");
  EXPECT_EQ(never_forwarded_reason("HOME"), "set by the runner");
  EXPECT_EQ(never_forwarded_reason(""), "invalid name");
  EXPECT_EQ(never_forwarded_reason("A=B"), "invalid name");
}

TEST(EnvFilter, BaseJobEnv) {
  EXPECT_EQ(base_job_env("/home/motor-job", "motor-job"),
            (Names{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/motor-job", "USER=motor-job",
                   "LOGNAME=motor-job", "LANG=C.UTF-8"}));
}

TEST(EnvFilter, JobEnvMergesForwardedButKeepsRunnerOwned) {
  auto env = job_env("/w", "motor-job",
                     {{"LANG", "de_DE.UTF-8"}, {"PATH", "/evil"}, {"HOME", "/evil"},
                      {"USER", "root"}, {"LOGNAME", "root"}, {"RUST_LOG", "info"}});
  EXPECT_EQ(env, (Names{"HOME=/w", "LANG=de_DE.UTF-8", "LOGNAME=motor-job",
                        "PATH=/usr/local/bin:/usr/bin:/bin", "RUST_LOG=info", "USER=motor-job"}));
  EXPECT_EQ(job_env("/w", "u", {}).size(), 5u);
}

TEST(EnvFilter, EndToEndWithConfigDefaults) {
  // The config's default allow list with a caller's typical environment.
  Names list = {"CC", "CXX", "CFLAGS", "LANG", "TERM", "TZ"};
  Vars req = {{"TERM", "xterm"},       {"PATH", "/home/a/bin:/usr/bin"}, {"HOME", "/home/a"},
              {"GH_TOKEN", "t"},       {"CC", "clang"},                  {"EDITOR", "vi"},
              {"SSH_AUTH_SOCK", "/s"}, {"LANG", "en_US.UTF-8"}};
  auto r = filter_env(req, list);
  EXPECT_EQ(r.forwarded,
            (Vars{{"CC", "clang"}, {"LANG", "en_US.UTF-8"}, {"TERM", "xterm"}}));
  EXPECT_EQ(r.not_forwarded, (Names{"EDITOR", "GH_TOKEN", "HOME", "PATH", "SSH_AUTH_SOCK"}));
  auto env = job_env("/j", "motor-job", r.forwarded);
  EXPECT_TRUE(std::find(env.begin(), env.end(), "LANG=en_US.UTF-8") != env.end());
  EXPECT_TRUE(std::find(env.begin(), env.end(), "HOME=/j") != env.end());
}

}  // namespace
}  // namespace motor::config
