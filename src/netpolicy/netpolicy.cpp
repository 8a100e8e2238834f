#include "netpolicy/netpolicy.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "motor/test_switches.hpp"

namespace motor::netpolicy {

const std::vector<Cidr>& blocked_ranges() {
  static const std::vector<Cidr> ranges = [] {
    std::vector<Cidr> out;
    for (std::string_view r : kBlockedRanges) out.push_back(*parse_cidr(r));
    return out;
  }();
  return ranges;
}

bool EgressPolicy::drops(Ipv4 a) const {
  if (std::find(host_addresses.begin(), host_addresses.end(), a) != host_addresses.end()) return true;
  for (const Cidr& c : test_allowed) {
    if (c.contains(a)) return false;
  }
  for (const Cidr& c : blocked_ranges()) {
    if (c.contains(a)) return true;
  }
  return false;
}

namespace {

std::string elements(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

}  // namespace

std::string egress_ruleset(const EgressPolicy& policy, const EgressNames& names) {
  std::vector<std::string> hosts, blocked, allowed;
  for (Ipv4 a : policy.host_addresses) hosts.push_back(format_ipv4(a));
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  for (const Cidr& c : blocked_ranges()) blocked.push_back(format_cidr(c));
  for (const Cidr& c : policy.test_allowed) allowed.push_back(format_cidr(c));
  const std::string jobs = names.job_veth_prefix + "*";
  const std::string subnet = format_cidr(names.job_subnet);

  std::string r;
  // `add` then `delete` makes the load idempotent: a table left by an earlier runner goes first.
  r += "add table inet motor_egress\ndelete table inet motor_egress\n";
  r += "table inet motor_egress {\n";
  r += fmt::format("  set host_addresses {{ type ipv4_addr; {}}}\n",
                   hosts.empty() ? "" : "elements = { " + elements(hosts) + " }; ");
  r += fmt::format("  set blocked {{ type ipv4_addr; flags interval; auto-merge; elements = {{ {} }}; }}\n", elements(blocked));
  if (!allowed.empty())
    r += fmt::format("  set test_allowed {{ type ipv4_addr; flags interval; auto-merge; elements = {{ {} }}; }}\n", elements(allowed));
  // What each drop rule stopped (`nft list counter inet motor_egress NAME`; the gate reads them).
  for (const char* c : {"ipv6_drops", "host_drops", "subnet_drops", "blocked_drops"}) r += fmt::format("  counter {} {{ }}\n", c);
  // Before conntrack and before anything else: what a job sends is judged here first.
  r += "  chain job_first {\n    type filter hook prerouting priority raw - 10; policy accept;\n";
  r += fmt::format("    iifname \"{}\" meta nfproto ipv6 counter name ipv6_drops drop\n", jobs);
  if (!control_weakened("outbound-host"))  // test build only: the host and its gateway reachable
    r += fmt::format("    iifname \"{}\" ip daddr @host_addresses counter name host_drops drop\n", jobs);
  // The job's own gateway (its resolver) answers DNS; nothing else in the jobs' subnet is reachable.
  r += fmt::format("    iifname \"{}\" ip daddr {} meta l4proto {{ tcp, udp }} th dport 53 return\n", jobs, subnet);
  r += fmt::format("    iifname \"{}\" ip daddr {} counter name subnet_drops drop\n", jobs, subnet);
  if (!allowed.empty()) r += fmt::format("    iifname \"{}\" ip daddr @test_allowed return\n", jobs);
  if (!control_weakened("outbound-ranges"))  // test build only: the blocked ranges reachable
    r += fmt::format("    iifname \"{}\" ip daddr @blocked counter name blocked_drops drop\n", jobs);
  r += "  }\n";
  // Jobs reach the uplink; from outside only replies come back; jobs never reach each other.
  r += "  chain forward {\n    type filter hook forward priority filter - 10; policy drop;\n";
  r += fmt::format("    iifname \"{}\" oifname \"{}\" meta nfproto ipv4 accept\n", jobs, names.uplink_veth);
  r += fmt::format("    iifname \"{}\" oifname \"{}\" ct state established,related accept\n", names.uplink_veth, jobs);
  r += "  }\n";
  // The egress namespace itself offers only the resolver, and only to jobs.
  r += "  chain input {\n    type filter hook input priority filter - 10; policy drop;\n";
  r += "    iif \"lo\" accept\n";
  r += fmt::format("    iifname \"{}\" meta nfproto ipv4 meta l4proto {{ tcp, udp }} th dport 53 accept\n", jobs);
  r += "    ct state established,related accept\n";
  r += "  }\n";
  r += "  chain outbound_nat {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  r += fmt::format("    oifname \"{}\" masquerade\n", names.uplink_veth);
  r += "  }\n";
  r += "}\n";
  return r;
}

std::string uplink_ruleset(const std::string& table, const std::string& uplink_veth, Ipv4 egress_address) {
  std::string r;
  r += fmt::format("add table ip {0}\ndelete table ip {0}\n", table);
  r += fmt::format("table ip {} {{\n", table);
  r += "  chain outbound_nat {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  r += fmt::format("    ip saddr {} oifname != \"{}\" masquerade\n", format_ipv4(egress_address), uplink_veth);
  r += "  }\n}\n";
  return r;
}

}  // namespace motor::netpolicy
