// The outbound network policy of a job (issue 9): which IPv4 destinations a job may reach, and
// the nftables ruleset that enforces it in the egress namespace (src/netpolicy/egress.cpp).
//
// A job reaches the public internet only: never a private, loopback, link-local, shared,
// documentation, benchmarking, multicast or reserved range, and never an address of the host or
// its gateway. The same classifier filters the resolver's answers (src/netpolicy/dns_filter.cpp),
// so a name never resolves to an address the job could not reach.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/ipv4.hpp"
#include "motor/expected.hpp"

namespace motor::netpolicy {

// The ranges no job packet may reach (issue 9), in order.
inline constexpr std::array<std::string_view, 15> kBlockedRanges = {
    "0.0.0.0/8",      "10.0.0.0/8",     "100.64.0.0/10",   "127.0.0.0/8",     "169.254.0.0/16",
    "172.16.0.0/12",  "192.0.0.0/24",   "192.0.2.0/24",    "192.168.0.0/16",  "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",    "240.0.0.0/4",     "255.255.255.255/32"};

const std::vector<Cidr>& blocked_ranges();

struct EgressPolicy {
  std::vector<Ipv4> host_addresses;  // every address of the host (uplink namespace) and its gateways
  std::vector<Cidr> test_allowed;    // --test-allow-destination (motor-runner-testing only)
  // Whether a packet from a job to `a` is dropped. Host addresses are dropped even when a test
  // range would allow them; a test range is the only way through a blocked range.
  bool drops(Ipv4 a) const;
};

// Names the egress set-up uses in the ruleset.
struct EgressNames {
  std::string job_veth_prefix = "mjv";  // egress-side veth of every job: mjv<slot>
  std::string uplink_veth = "up0";      // egress-side veth to the uplink namespace
  Cidr job_subnet;                      // every job's /30 lies here; gateways answer DNS
};

// The ruleset loaded into the egress namespace (`nft -f`), one table, replacing any earlier one.
// Chains hook prerouting before conntrack (priority raw - 10), so the drop rules are checked
// before any other rule sees a job's packet.
std::string egress_ruleset(const EgressPolicy& policy, const EgressNames& names);

// The masquerade of the egress namespace's uplink address in the uplink namespace, in a table of
// its own (`table ip <table>`); `delete table` removes it.
std::string uplink_ruleset(const std::string& table, const std::string& uplink_veth, Ipv4 egress_address);

}  // namespace motor::netpolicy
