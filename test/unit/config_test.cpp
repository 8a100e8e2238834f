// Config parsing: the embedded defaults, the format, and every kind of error naming key and line.
#include "config/config.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "source_file.hpp"

namespace motor::config {
namespace {

Config parse_ok(std::string_view text) {
  auto c = parse_config(text, "/etc/motor.conf");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? *c : Config{};
}

std::string parse_error(std::string_view text) {
  auto c = parse_config(text, "/etc/motor.conf");
  EXPECT_FALSE(c.ok()) << "parsed, but an error was expected for: " << text;
  if (c.ok()) return "";
  EXPECT_EQ(c.error().code, "config");
  return c.error().message;
}

// The error names the origin, the line and the key.
void expect_error(std::string_view text, int line, std::string_view key,
                  std::string_view fragment) {
  std::string msg = parse_error(text);
  std::string head = "config /etc/motor.conf line " + std::to_string(line) + ": ";
  if (!key.empty()) head += std::string(key) + ": ";
  EXPECT_EQ(msg.rfind(head, 0), 0u) << "message: " << msg << "\nexpected to start with: " << head;
  EXPECT_NE(msg.find(fragment), std::string::npos)
      << "message: " << msg << "\nexpected to contain: " << fragment;
}

TEST(ConfigDefaults, EmbeddedTextParsesToDefaultConfig) {
  auto c = parse_config(default_config_text());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, Config{});
}

TEST(ConfigDefaults, EmptyTextIsDefaultConfig) {
  EXPECT_EQ(parse_ok(""), Config{});
  EXPECT_EQ(parse_ok("\n\n# only a comment\n   \n"), Config{});
}

TEST(ConfigDefaults, EmbeddedTextSetsEveryKey) {
  // Every key appears (uncommented) in the default text, so it documents all of them.
  for (std::string_view key :
       {"socket_path", "socket_group", "state_dir", "workspace_root", "allowed_uids",
        "allowed_groups", "job_user", "cgroup_parent", "cgroup_mode", "default_timeout_s",
        "max_timeout_s", "default_cpus", "default_memory", "max_memory", "pids_max",
        "max_running_jobs", "max_argument_size", "job_log_max_size", "client_buffer_size",
        "finished_jobs_kept", "max_sessions", "shutdown", "shutdown_grace_s", "env_allow"}) {
    std::string line = "\n" + std::string(key) + " = ";
    EXPECT_NE(default_config_text().find(line), std::string_view::npos) << key;
    // And setting it twice is an error: each is a known key.
    std::string twice = std::string(default_config_text()) + std::string(key) + " = x\n";
    std::string msg = parse_error(twice);
    EXPECT_NE(msg.find(std::string(key) + ": set twice"), std::string::npos) << msg;
  }
}

TEST(ConfigDefaults, ShippedExampleIsTheEmbeddedText) {
  EXPECT_EQ(test::read_source_file("conf/motor-runner.conf"), default_config_text());
}

TEST(ConfigDefaults, EffectiveWorkspaceRoot) {
  Config c = parse_ok("state_dir = /srv/motor/\n");
  EXPECT_EQ(c.state_dir, "/srv/motor");  // trailing slash dropped
  EXPECT_EQ(c.effective_workspace_root(), "/srv/motor/workspaces");
  c = parse_ok("workspace_root = /data/ws\n");
  EXPECT_EQ(c.effective_workspace_root(), "/data/ws");
}

TEST(ConfigFormat, AllKeysSet) {
  Config c = parse_ok(
      "socket_path = /tmp/m.sock\n"
      "socket_group = builders\n"
      "state_dir = /tmp/state\n"
      "workspace_root = /tmp/ws\n"
      "allowed_uids = 0, 1000,1001\n"
      "allowed_groups = motor, wheel\n"
      "job_user = builder\n"
      "cgroup_parent = system.slice/motor\n"
      "cgroup_mode = v1\n"
      "default_timeout_s = 30\n"
      "max_timeout_s = 60\n"
      "default_cpus = 2\n"
      "default_memory = 512M\n"
      "max_memory = 1G\n"
      "pids_max = 100\n"
      "max_running_jobs = 3\n"
      "max_argument_size = 64K\n"
      "job_log_max_size = 10M\n"
      "client_buffer_size = 128K\n"
      "finished_jobs_kept = 0\n"
      "max_sessions = 5\n"
      "shutdown = finish\n"
      "shutdown_grace_s = 0\n"
      "env_allow = CC, MY_BUILD_*\n");
  EXPECT_EQ(c.socket_path, "/tmp/m.sock");
  EXPECT_EQ(c.socket_group, "builders");
  EXPECT_EQ(c.state_dir, "/tmp/state");
  EXPECT_EQ(c.workspace_root, "/tmp/ws");
  EXPECT_EQ(c.allowed_uids, (std::vector<uid_t>{0, 1000, 1001}));
  EXPECT_EQ(c.allowed_groups, (std::vector<std::string>{"motor", "wheel"}));
  EXPECT_EQ(c.job_user, "builder");
  EXPECT_EQ(c.cgroup_parent, "system.slice/motor");
  EXPECT_EQ(c.cgroup_mode, CgroupMode::kV1);
  EXPECT_EQ(c.default_timeout_s, 30);
  EXPECT_EQ(c.max_timeout_s, 60);
  EXPECT_EQ(c.default_cpus, 2);
  EXPECT_EQ(c.default_memory_bytes, int64_t{512} << 20);
  EXPECT_EQ(c.max_memory_bytes, int64_t{1} << 30);
  EXPECT_EQ(c.pids_max, 100);
  EXPECT_EQ(c.max_running_jobs, 3);
  EXPECT_EQ(c.max_argument_bytes, 64 * 1024);
  EXPECT_EQ(c.job_log_max_bytes, 10 << 20);
  EXPECT_EQ(c.client_buffer_bytes, 128 * 1024);
  EXPECT_EQ(c.finished_jobs_kept, 0);
  EXPECT_EQ(c.max_sessions, 5);
  EXPECT_EQ(c.shutdown, ShutdownPolicy::kFinish);
  EXPECT_EQ(c.shutdown_grace_s, 0);
  EXPECT_EQ(c.env_allow, (std::vector<std::string>{"CC", "MY_BUILD_*"}));
}

TEST(ConfigFormat, EnumValues) {
  EXPECT_EQ(parse_ok("cgroup_mode = auto").cgroup_mode, CgroupMode::kAuto);
  EXPECT_EQ(parse_ok("cgroup_mode = v2").cgroup_mode, CgroupMode::kV2);
  EXPECT_EQ(parse_ok("cgroup_mode = \"v1\"").cgroup_mode, CgroupMode::kV1);
  EXPECT_EQ(parse_ok("shutdown = kill").shutdown, ShutdownPolicy::kKill);
  EXPECT_EQ(parse_ok("shutdown = finish").shutdown, ShutdownPolicy::kFinish);
  EXPECT_EQ(parse_ok("").job_backend, JobBackend::kDirect);
  EXPECT_EQ(parse_ok("job_backend = auto").job_backend, JobBackend::kAuto);
  EXPECT_EQ(parse_ok("job_backend = direct").job_backend, JobBackend::kDirect);
  EXPECT_EQ(parse_ok("job_backend = systemd").job_backend, JobBackend::kSystemd);
  const std::string msg = parse_error("job_backend = docker\n");
  EXPECT_NE(msg.find("expected auto, direct or systemd, got \"docker\""), std::string::npos) << msg;
}

TEST(ConfigFormat, CommentsAndBlanks) {
  Config c = parse_ok(
      "# a comment\n"
      "   # an indented comment\n"
      "\n"
      "\t\n"
      "max_sessions = 7   # a trailing comment\n"
      "socket_path = /run/a#b.sock\n"  // '#' not after a blank is part of the value
      "state_dir=/srv/x#y\n"
      "  default_cpus\t=\t3  \r\n");
  EXPECT_EQ(c.max_sessions, 7);
  EXPECT_EQ(c.socket_path, "/run/a#b.sock");
  EXPECT_EQ(c.state_dir, "/srv/x#y");
  EXPECT_EQ(c.default_cpus, 3);
}

TEST(ConfigFormat, NoTrailingNewline) { EXPECT_EQ(parse_ok("max_sessions = 9").max_sessions, 9); }

TEST(ConfigFormat, QuotedStrings) {
  Config c = parse_ok(
      "socket_path = \"/run/with space/m.sock\"  # comment\n"
      "state_dir = \"/var/lib/a # not a comment\"\n"
      "workspace_root = \"/ws/q\\\"uote\\\\back\"\n");
  EXPECT_EQ(c.socket_path, "/run/with space/m.sock");
  EXPECT_EQ(c.state_dir, "/var/lib/a # not a comment");
  EXPECT_EQ(c.workspace_root, "/ws/q\"uote\\back");
  EXPECT_EQ(parse_ok("workspace_root = \"\"").workspace_root, "");
  EXPECT_EQ(parse_ok("workspace_root =").workspace_root, "");
  EXPECT_EQ(parse_ok("max_sessions = \"12\"").max_sessions, 12);
}

TEST(ConfigFormat, Lists) {
  EXPECT_EQ(parse_ok("allowed_uids = 5").allowed_uids, (std::vector<uid_t>{5}));
  EXPECT_EQ(parse_ok("allowed_uids =").allowed_uids, (std::vector<uid_t>{}));
  EXPECT_EQ(parse_ok("allowed_uids =   # nobody by uid").allowed_uids, (std::vector<uid_t>{}));
  EXPECT_EQ(parse_ok("allowed_uids = 0,1000 , 4294967294").allowed_uids,
            (std::vector<uid_t>{0, 1000, 4294967294u}));
  EXPECT_EQ(parse_ok("allowed_groups = \"motor\", \"build-ers\"").allowed_groups,
            (std::vector<std::string>{"motor", "build-ers"}));
  EXPECT_EQ(parse_ok("env_allow = A, B # C").env_allow, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(parse_ok("env_allow =").env_allow, (std::vector<std::string>{}));
}

TEST(ConfigSizes, ParseSize) {
  EXPECT_EQ(*parse_size("0"), 0);
  EXPECT_EQ(*parse_size("512"), 512);
  EXPECT_EQ(*parse_size("64K"), 64 * 1024);
  EXPECT_EQ(*parse_size("64k"), 64 * 1024);
  EXPECT_EQ(*parse_size("3M"), 3 * 1024 * 1024);
  EXPECT_EQ(*parse_size("2G"), int64_t{2} << 30);
  EXPECT_EQ(*parse_size("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*parse_size("2GB"), int64_t{2} << 30);
  EXPECT_EQ(*parse_size("8589934591G"), int64_t{8589934591} << 30);
  for (std::string_view bad : {"", "G", "abc", "1.5G", "2T", "2 G", "-1", "-1G", "1GG", "2Gb",
                               "9223372036854775808", "8589934592G", "0x10", " 1"}) {
    auto r = parse_size(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, "config");
    }
  }
  EXPECT_NE(parse_size("-1G").error().message.find("negative"), std::string::npos);
  EXPECT_NE(parse_size("abc").error().message.find("\"abc\""), std::string::npos);
}

TEST(ConfigSizes, SizeKeys) {
  Config c = parse_ok("default_memory = 1048576\nmax_memory = 1024M\njob_log_max_size = 64K\n");
  EXPECT_EQ(c.default_memory_bytes, 1 << 20);
  EXPECT_EQ(c.max_memory_bytes, int64_t{1} << 30);
  EXPECT_EQ(c.job_log_max_bytes, 64 * 1024);
  expect_error("default_memory = lots\n", 1, "default_memory", "expected a size");
  expect_error("default_memory = 1K\n", 1, "default_memory", "at least 1M");
  expect_error("default_memory = -2G\n", 1, "default_memory", "negative");
  expect_error("max_argument_size = 2M\n", 1, "max_argument_size", "at most 1M");
  expect_error("client_buffer_size = 0\n", 1, "client_buffer_size", "at least 64K");
  expect_error("job_log_max_size = 99999999999999999999\n", 1, "job_log_max_size", "too large");
}

TEST(ConfigErrors, MessageFormatMatchesTheDocumentedExample) {
  std::string text(6, '\n');
  text += "default_timeout_s = abc\n";
  EXPECT_EQ(parse_error(text),
            "config /etc/motor.conf line 7: default_timeout_s: expected a whole number of "
            "seconds, got \"abc\"");
  auto c = parse_config("max_sessions = 0", "config");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message.rfind("config line 1: max_sessions: ", 0), 0u) << c.error().message;
}

TEST(ConfigErrors, UnknownKey) {
  expect_error("max_sessions = 3\nmax_sesions = 4\n", 2, "max_sesions", "unknown key");
  expect_error("max_sesions = 4\n", 1, "max_sesions", "did you mean max_sessions?");
  expect_error("frobnicate = 1\n", 1, "frobnicate", "unknown key");
  // The *_bytes field names are not file keys: the file says default_memory etc.
  expect_error("default_memory_bytes = 1G\n", 1, "default_memory_bytes", "unknown key");
}

TEST(ConfigErrors, DuplicateKey) {
  expect_error("pids_max = 10\n\n# again\npids_max = 10\n", 4, "pids_max",
               "set twice (first on line 1)");
}

TEST(ConfigErrors, MalformedLines) {
  expect_error("max_sessions 4\n", 1, "", "expected `key = value`");
  expect_error("= 4\n", 1, "", "expected a key name");
  expect_error("Max_Sessions = 4\n", 1, "", "expected a key name");
  expect_error("max sessions = 4\n", 1, "", "expected a key name");
  expect_error(std::string_view("max_sessions = 4\0\n", 18), 1, "", "NUL");
}

TEST(ConfigErrors, BadQuoting) {
  expect_error("socket_path = \"/run/x.sock\n", 1, "socket_path", "unterminated quoted string");
  expect_error("socket_path = \"/run/x.sock\" extra\n", 1, "socket_path", "unexpected text");
  expect_error("socket_path = /run/\"x\".sock\n", 1, "socket_path", "quote must surround");
  expect_error("socket_path = \"/run/\\x.sock\"\n", 1, "socket_path", "backslash");
}

TEST(ConfigErrors, BadLists) {
  expect_error("allowed_uids = 0,,1000\n", 1, "allowed_uids", "empty item");
  expect_error("allowed_uids = 0, 1000,\n", 1, "allowed_uids", "ends with a comma");
  expect_error("allowed_uids = , 1\n", 1, "allowed_uids", "empty item");
  expect_error("allowed_uids = 0 1000\n", 1, "allowed_uids", "numeric uids");
  expect_error("allowed_uids = \"0\" 1000\n", 1, "allowed_uids", "expected a comma");
  expect_error("allowed_uids = alice\n", 1, "allowed_uids", "numeric uids, got \"alice\"");
  expect_error("allowed_uids = -1\n", 1, "allowed_uids", "at least 0");
  expect_error("allowed_uids = 4294967295\n", 1, "allowed_uids", "at most 4294967294");
  expect_error("allowed_uids = 7, 7\n", 1, "allowed_uids", "listed twice");
  expect_error("allowed_groups = motor, -bad\n", 1, "allowed_groups", "group names");
  expect_error("allowed_groups = motor, motor\n", 1, "allowed_groups", "listed twice");
}

TEST(ConfigErrors, BadNumbers) {
  expect_error("default_timeout_s = -5\n", 1, "default_timeout_s", "at least 1, got -5");
  expect_error("default_timeout_s = 0\n", 1, "default_timeout_s", "at least 1");
  expect_error("default_timeout_s = 1.5\n", 1, "default_timeout_s", "whole number of seconds");
  expect_error("default_timeout_s =\n", 1, "default_timeout_s", "got \"\"");
  expect_error("max_timeout_s = 99999999999999999999999\n", 1, "max_timeout_s", "at most");
  expect_error("max_sessions = 0\n", 1, "max_sessions", "at least 1, got 0");
  expect_error("max_running_jobs = 0\n", 1, "max_running_jobs", "at least 1");
  expect_error("default_cpus = 0\n", 1, "default_cpus", "at least 1");
  expect_error("default_cpus = two\n", 1, "default_cpus", "whole number of CPUs");
  expect_error("pids_max = 0\n", 1, "pids_max", "at least 1");
  expect_error("finished_jobs_kept = -1\n", 1, "finished_jobs_kept", "at least 0");
  expect_error("shutdown_grace_s = -1\n", 1, "shutdown_grace_s", "at least 0");
  expect_error("max_sessions = +3\n", 1, "max_sessions", "whole number");
}

TEST(ConfigErrors, BadEnums) {
  expect_error("cgroup_mode = v3\n", 1, "cgroup_mode", "expected auto, v2 or v1, got \"v3\"");
  expect_error("cgroup_mode = V2\n", 1, "cgroup_mode", "expected auto, v2 or v1");
  expect_error("shutdown = wait\n", 1, "shutdown", "expected kill or finish, got \"wait\"");
}

TEST(ConfigErrors, BadPaths) {
  expect_error("socket_path = run/motor.sock\n", 1, "socket_path", "absolute path");
  expect_error("socket_path =\n", 1, "socket_path", "absolute path");
  expect_error("socket_path = /run/motor/\n", 1, "socket_path", "not a directory");
  expect_error("socket_path = /" + std::string(120, 'a') + "\n", 1, "socket_path",
               "at most 107 bytes");
  expect_error("state_dir = var/lib/motor\n", 1, "state_dir", "absolute path");
  expect_error("state_dir = /\n", 1, "state_dir", "root directory");
  expect_error("state_dir =\n", 1, "state_dir", "absolute path");
  expect_error("workspace_root = ws\n", 1, "workspace_root", "absolute path");
  expect_error("cgroup_parent = /motor\n", 1, "cgroup_parent", "relative cgroup name");
  expect_error("cgroup_parent = a/../b\n", 1, "cgroup_parent", "relative cgroup name");
  expect_error("cgroup_parent = a//b\n", 1, "cgroup_parent", "relative cgroup name");
  expect_error("cgroup_parent =\n", 1, "cgroup_parent", "relative cgroup name");
}

TEST(ConfigErrors, BadNames) {
  expect_error("job_user = root\n", 1, "job_user", "never run as root");
  expect_error("job_user =\n", 1, "job_user", "user name");
  expect_error("job_user = 1000\n", 1, "job_user", "user name");
  expect_error("job_user = a b\n", 1, "job_user", "user name");
  expect_error("socket_group = " + std::string(40, 'g') + "\n", 1, "socket_group", "group name");
}

TEST(ConfigErrors, BadEnvAllow) {
  expect_error("env_allow = CC, GH_TOKEN\n", 1, "env_allow", "never forwarded");
  expect_error("env_allow = my_secret\n", 1, "env_allow", "never forwarded");
  expect_error("env_allow = SSH_AUTH_SOCK\n", 1, "env_allow", "never forwarded");
  expect_error("env_allow = PATH\n", 1, "env_allow", "never forwarded");
  expect_error("env_allow = CC, CC\n", 1, "env_allow", "listed twice");
  expect_error("env_allow = 1CC\n", 1, "env_allow", "environment variable names");
  expect_error("env_allow = A=B\n", 1, "env_allow", "environment variable names");
  expect_error("env_allow = *\n", 1, "env_allow", "environment variable names");
}

TEST(ConfigErrors, CrossKeyLimits) {
  expect_error("max_timeout_s = 60\n", 1, "max_timeout_s",
               "default_timeout_s (600) is more than max_timeout_s (60)");
  expect_error("max_timeout_s = 60\ndefault_timeout_s = 61\n", 2, "default_timeout_s",
               "is more than max_timeout_s");
  expect_error("default_memory = 32G\n", 1, "default_memory",
               "default_memory (32G) is more than max_memory (16G)");
  EXPECT_EQ(parse_ok("default_timeout_s = 60\nmax_timeout_s = 60").max_timeout_s, 60);
}

TEST(ConfigErrors, LongValuesAreCutInMessages) {
  std::string msg = parse_error("cgroup_mode = " + std::string(5000, 'x') + "\n");
  EXPECT_LT(msg.size(), 300u) << msg;
  EXPECT_NE(msg.find("..."), std::string::npos);
  msg = parse_error("cgroup_mode = \"a\tb\"\n");
  EXPECT_NE(msg.find("a\\x09b"), std::string::npos) << msg;
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/motor-config-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0644) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST_F(ConfigFile, LoadsAndNamesThePathInErrors) {
  auto ok = load_config_file(write("good.conf", "max_sessions = 3\n"));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->max_sessions, 3);

  std::string bad = write("bad.conf", "# x\nmax_sessions = 0\n");
  auto err = load_config_file(bad);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.error().code, "config");
  EXPECT_EQ(err.error().message.rfind("config " + bad + " line 2: max_sessions: ", 0), 0u)
      << err.error().message;
}

TEST_F(ConfigFile, MissingFileNamesThePath) {
  std::string path = dir_ + "/nope.conf";
  auto err = load_config_file(path);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.error().code, "config");
  EXPECT_NE(err.error().message.find(path), std::string::npos);
  EXPECT_NE(err.error().message.find("No such file"), std::string::npos) << err.error().message;
}

TEST_F(ConfigFile, DirectoryAndWorldWritableRefused) {
  auto err = load_config_file(dir_);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message.find("not a regular file"), std::string::npos);
  auto ww = load_config_file(write("ww.conf", "", 0666));
  ASSERT_FALSE(ww.ok());
  EXPECT_NE(ww.error().message.find("writable by everyone"), std::string::npos);
}

TEST(ConfigOutbound, KeysAndTheirErrors) {
  auto c = parse_config(
      "outbound_network = true\noutbound_uplink_netns = up-1\noutbound_resolvers = 10.0.0.2, 9.9.9.9\n"
      "outbound_subnet = 100.90.0.0/20\n");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->outbound_network);
  EXPECT_EQ(c->outbound_uplink_netns, "up-1");
  EXPECT_EQ(c->outbound_resolvers, (std::vector<std::string>{"10.0.0.2", "9.9.9.9"}));
  EXPECT_EQ(c->outbound_subnet, "100.90.0.0/20");
  EXPECT_FALSE(Config{}.outbound_network);  // off unless the operator enables it
  expect_error("outbound_network = yes\n", 1, "outbound_network", "true or false");
  expect_error("outbound_uplink_netns = a/b\n", 1, "outbound_uplink_netns", "network namespace name");
  expect_error("outbound_uplink_netns = ..\n", 1, "outbound_uplink_netns", "network namespace name");
  expect_error("outbound_resolvers = 10.0.0.256\n", 1, "outbound_resolvers", "IPv4 addresses");
  expect_error("outbound_resolvers = ::1\n", 1, "outbound_resolvers", "IPv4 addresses");
  expect_error("outbound_subnet = 100.88.0.1/16\n", 1, "outbound_subnet", "host bits");
  expect_error("outbound_subnet = 100.88.0.0/30\n", 1, "outbound_subnet", "/8 to /29");
  expect_error("outbound_subnet = nope\n", 1, "outbound_subnet", "not an IPv4 address");
}

}  // namespace
}  // namespace motor::config
