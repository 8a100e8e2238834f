// The outbound address classifier over every range boundary, and the generated nftables
// ruleset (its text, and `nft --check` in a throwaway network namespace).
#include "netpolicy/netpolicy.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace motor::netpolicy {
namespace {

Ipv4 ip(const char* text) {
  auto a = parse_ipv4(text);
  EXPECT_TRUE(a) << text;
  return a ? *a : 0;
}

TEST(NetPolicy, ParsesOnlyPlainDottedQuads) {
  EXPECT_EQ(*parse_ipv4("1.2.3.4"), 0x01020304u);
  EXPECT_EQ(*parse_ipv4("255.255.255.255"), 0xFFFFFFFFu);
  EXPECT_EQ(*parse_ipv4("0.0.0.0"), 0u);
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4 ", " 1.2.3.4", "1..2.3", "a.b.c.d",
                          "1.2.3.-4", "1.2.3.1000", "0x1.2.3.4"})
    EXPECT_FALSE(parse_ipv4(bad)) << bad;
  EXPECT_EQ(format_ipv4(0xC0A80001u), "192.168.0.1");
  auto c = parse_cidr("10.0.0.0/8");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix, 8);
  EXPECT_EQ(format_cidr(*c), "10.0.0.0/8");
  EXPECT_EQ(parse_cidr("1.2.3.4")->prefix, 32);
  EXPECT_EQ(parse_cidr("0.0.0.0/0")->prefix, 0);
  for (const char* bad : {"10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/x", "x/8"})
    EXPECT_FALSE(parse_cidr(bad)) << bad;
}

// Every range the issue lists, at its first and last address and one past either side.
TEST(NetPolicy, ClassifierHoldsAtEveryRangeBoundary) {
  const EgressPolicy policy;
  struct Case {
    const char* address;
    bool dropped;
  };
  const Case cases[] = {
      {"0.0.0.0", true},         {"0.255.255.255", true},   {"1.0.0.0", false},
      {"9.255.255.255", false},  {"10.0.0.0", true},        {"10.255.255.255", true},   {"11.0.0.0", false},
      {"100.63.255.255", false}, {"100.64.0.0", true},      {"100.127.255.255", true},  {"100.128.0.0", false},
      {"126.255.255.255", false}, {"127.0.0.0", true},      {"127.255.255.255", true},  {"128.0.0.0", false},
      {"169.253.255.255", false}, {"169.254.0.0", true},    {"169.254.169.254", true},  {"169.254.255.255", true},
      {"169.255.0.0", false},    {"172.15.255.255", false}, {"172.16.0.0", true},       {"172.31.255.255", true},
      {"172.32.0.0", false},     {"191.255.255.255", false}, {"192.0.0.0", true},       {"192.0.0.255", true},
      {"192.0.1.0", false},      {"192.0.1.255", false},    {"192.0.2.0", true},        {"192.0.2.255", true},
      {"192.0.3.0", false},      {"192.167.255.255", false}, {"192.168.0.0", true},     {"192.168.255.255", true},
      {"192.169.0.0", false},    {"198.17.255.255", false}, {"198.18.0.0", true},       {"198.19.255.255", true},
      {"198.20.0.0", false},     {"198.51.99.255", false},  {"198.51.100.0", true},     {"198.51.100.255", true},
      {"198.51.101.0", false},   {"203.0.112.255", false},  {"203.0.113.0", true},      {"203.0.113.255", true},
      {"203.0.114.0", false},    {"223.255.255.255", false}, {"224.0.0.0", true},       {"239.255.255.255", true},
      {"240.0.0.0", true},       {"255.255.255.254", true}, {"255.255.255.255", true},  {"8.8.8.8", false},
      {"93.184.216.34", false},
  };
  for (const Case& c : cases) EXPECT_EQ(policy.drops(ip(c.address)), c.dropped) << c.address;
  EXPECT_EQ(blocked_ranges().size(), kBlockedRanges.size());
}

TEST(NetPolicy, HostAddressesAreDroppedEvenInsideATestRange) {
  EgressPolicy policy;
  policy.host_addresses = {ip("93.184.216.34"), ip("198.51.100.1")};
  policy.test_allowed = {*parse_cidr("198.51.100.0/24")};
  EXPECT_TRUE(policy.drops(ip("93.184.216.34")));
  EXPECT_FALSE(policy.drops(ip("93.184.216.35")));
  EXPECT_TRUE(policy.drops(ip("198.51.100.1")));
  EXPECT_FALSE(policy.drops(ip("198.51.100.7")));   // the test range opens its own addresses...
  EXPECT_TRUE(policy.drops(ip("203.0.113.7")));     // ...and no other blocked range
  EXPECT_TRUE(policy.drops(ip("10.0.0.1")));
}

EgressNames names() {
  EgressNames n;
  n.job_subnet = *parse_cidr("100.88.0.0/16");
  return n;
}

TEST(NetPolicy, RulesetDropsBeforeAnythingElse) {
  EgressPolicy policy;
  policy.host_addresses = {ip("203.0.113.1"), ip("192.0.2.254"), ip("203.0.113.1")};
  const std::string r = egress_ruleset(policy, names());
  for (std::string_view range : kBlockedRanges) EXPECT_NE(r.find(std::string(range)), std::string::npos) << range;
  EXPECT_NE(r.find("elements = { 192.0.2.254, 203.0.113.1 }"), std::string::npos) << r;  // sorted, once
  EXPECT_NE(r.find("hook prerouting priority raw - 10"), std::string::npos);
  // In the first chain: IPv6, then the host, then the jobs' subnet (resolver only), then ranges.
  const size_t v6 = r.find("meta nfproto ipv6 counter name ipv6_drops drop"), host = r.find("@host_addresses counter name host_drops drop"),
               dns = r.find("th dport 53 return"), subnet = r.find("ip daddr 100.88.0.0/16 counter name subnet_drops drop"),
               blocked = r.find("@blocked counter name blocked_drops drop");
  EXPECT_LT(v6, host);
  EXPECT_LT(host, dns);
  EXPECT_LT(dns, subnet);
  EXPECT_LT(subnet, blocked);
  EXPECT_NE(blocked, std::string::npos);
  EXPECT_EQ(r.find("test_allowed"), std::string::npos);  // only a test build has it
  EXPECT_NE(r.find("policy drop;\n    iifname \"mjv*\" oifname \"up0\""), std::string::npos);
  policy.test_allowed = {*parse_cidr("198.51.100.0/24")};
  const std::string t = egress_ruleset(policy, names());
  EXPECT_LT(t.find("@host_addresses counter"), t.find("@test_allowed return"));
  EXPECT_LT(t.find("@test_allowed return"), t.find("@blocked counter"));
}

// nft itself accepts what we generate (--check: parsed and validated by the kernel, not
// committed), in a network namespace of its own so nothing of the host is touched.
TEST(NetPolicy, RulesetPassesNftCheck) {
  if (geteuid() != 0 || access("/usr/sbin/nft", X_OK) != 0) {
    if (std::getenv("CI") && std::string(std::getenv("CI")) == "true") FAIL() << "needs root and nft under CI=true";
    GTEST_SKIP() << "needs root and nft (scripts/setup installs nftables)";
  }
  EgressPolicy policy;
  policy.host_addresses = {ip("198.51.100.1"), ip("198.51.100.254")};
  const std::string rules[] = {egress_ruleset(policy, names()),
                               [&] {
                                 EgressPolicy p = policy;
                                 p.test_allowed = {*parse_cidr("198.51.100.0/24")};
                                 return egress_ruleset(p, names());
                               }(),
                               egress_ruleset(EgressPolicy{}, names()),
                               uplink_ruleset("motor_eg_abc123", "meg-abc123", ip("100.88.0.2"))};
  for (const std::string& text : rules) {
    char path[] = "/tmp/motor-nft-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    const pid_t pid = fork();
    if (pid == 0) {
      if (unshare(CLONE_NEWNET) != 0) _exit(126);
      execl("/usr/sbin/nft", "nft", "--check", "-f", path, static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    unlink(path);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  }
}

}  // namespace
}  // namespace motor::netpolicy
