// `--host ssh://[user@]host[:port]` and $MOTOR_HOST: what the client accepts, what it refuses
// before ssh ever sees it (nothing ssh could take for an option), and which one wins.
#include "client/ssh_target.hpp"

#include <gtest/gtest.h>

#include "client/cli.hpp"

namespace motor::client {
namespace {

TEST(SshTarget, ParsesUserHostAndPort) {
  auto t = parse_ssh_url("ssh://motor@build-1.example:2222");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->user, "motor");
  EXPECT_EQ(t->host, "build-1.example");
  EXPECT_EQ(t->port, 2222);
  auto bare = parse_ssh_url("ssh://buildhost/");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->user, "");
  EXPECT_EQ(bare->port, 0);
  auto v6 = parse_ssh_url("ssh://motor@[::1]:22");
  ASSERT_TRUE(v6.ok()) << v6.error().message;
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 22);
}

TEST(SshTarget, RefusesWhatSshCouldMisread) {
  for (const char* url : {"buildhost", "http://buildhost", "ssh://", "ssh://-oProxyCommand=x", "ssh://-l@host",
                          "ssh://host:0", "ssh://host:65536", "ssh://host:22x", "ssh://host;rm", "ssh://a b@host",
                          "ssh://host:", "ssh://[::1", "ssh://host/path"}) {
    auto t = parse_ssh_url(url);
    EXPECT_FALSE(t.ok()) << url;
    if (!t.ok()) {
      EXPECT_EQ(t.error().code, "usage") << url;
    }
  }
}

TEST(SshTarget, HostOptionAndEnvironment) {
  auto from_env = parse_cli({"list"}, nullptr, "ssh://motor@b1");
  ASSERT_TRUE(from_env.ok());
  ASSERT_TRUE(from_env->host.has_value());
  EXPECT_EQ(from_env->host->host, "b1");
  auto option = parse_cli({"--host", "ssh://b2", "list"}, nullptr, "ssh://motor@b1");
  ASSERT_TRUE(option.ok());
  EXPECT_EQ(option->host->host, "b2");
  auto socket_wins = parse_cli({"--socket", "/s", "list"}, nullptr, "ssh://motor@b1");
  ASSERT_TRUE(socket_wins.ok());
  EXPECT_FALSE(socket_wins->host.has_value());
  EXPECT_EQ(socket_wins->socket_path, "/s");
  EXPECT_FALSE(parse_cli({"--socket", "/s", "--host", "ssh://b", "list"}, nullptr, nullptr).ok());
  auto bad_env = parse_cli({"list"}, nullptr, "build1");
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.error().message.find("MOTOR_HOST=build1"), std::string::npos) << bad_env.error().message;
  auto empty = parse_cli({"list"}, nullptr, "");  // set but empty: as if unset
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->host.has_value());
}

}  // namespace
}  // namespace motor::client
