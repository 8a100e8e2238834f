#include "sandbox/netpolicy.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "motor/test_switches.hpp"

namespace motor::sandbox {

std::optional<Ipv4> parse_ipv4(std::string_view text) {
  Ipv4 out = 0;
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') return std::nullopt;
    const size_t start = i;
    uint32_t v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 3) v = v * 10 + static_cast<uint32_t>(text[i++] - '0');
    if (v > 255 || (i - start > 1 && text[start] == '0')) return std::nullopt;
    out = (out << 8) | v;
    ++parts;
    if (parts < 4) {
      if (i >= text.size() || text[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != text.size()) return std::nullopt;
  return out;
}

std::string format_ipv4(Ipv4 a) {
  return fmt::format("{}.{}.{}.{}", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF, a & 0xFF);
}

Expected<Cidr> parse_cidr(std::string_view text) {
  const auto slash = text.find('/');
  auto addr = parse_ipv4(text.substr(0, slash));
  if (!addr) return make_error("config", fmt::format("\"{}\" is not an IPv4 address or a.b.c.d/n range", text.substr(0, 64)));
  Cidr c;
  c.base = *addr;
  c.prefix = 32;
  if (slash != std::string_view::npos) {
    const std::string_view n = text.substr(slash + 1);
    if (n.empty() || n.size() > 2 || !std::all_of(n.begin(), n.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        (n.size() == 2 && n[0] == '0'))
      return make_error("config", fmt::format("\"{}\": the prefix length must be 0 to 32", text.substr(0, 64)));
    c.prefix = n.size() == 1 ? n[0] - '0' : (n[0] - '0') * 10 + (n[1] - '0');
    if (c.prefix > 32) return make_error("config", fmt::format("\"{}\": the prefix length must be 0 to 32", text.substr(0, 64)));
  }
  const Ipv4 host_bits = Cidr::host_mask(c.prefix);
  if ((c.base & host_bits) != 0)
    return make_error("config", fmt::format("\"{}\" has host bits set; write {}", text.substr(0, 64),
                                            format_cidr({c.base & ~host_bits, c.prefix})));
  return c;
}

std::string format_cidr(const Cidr& c) { return fmt::format("{}/{}", format_ipv4(c.base), c.prefix); }

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

}  // namespace motor::sandbox
