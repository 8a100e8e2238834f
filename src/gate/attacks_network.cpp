// Steps of the network attacks (attack_steps.hpp): the job's own network namespace, and, where the
// config lets jobs ask for it, the outbound egress policy.
//
// The egress policy drops silently, so a dropped connect times out; "timeout" alone would also be
// what an unrouted address does. The evidence is the policy's own drop counter in the runner's
// egress namespace, read before and after the attack: the drop rule must be what stopped it.
// And where the targets can be reached without touching an outside address, the gate listens
// there itself (arrival_listeners.hpp): the job also sends UDP to those listeners, and a datagram
// that arrives is GOT THROUGH, whatever the job's connects reported.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gate/arrival_listeners.hpp"
#include "gate/attack_steps.hpp"
#include "motor/unique_fd.hpp"
#include "netpolicy/dns_filter.hpp"
#include "netpolicy/egress.hpp"
#include "netpolicy/netpolicy.hpp"
#include "netpolicy/outbound.hpp"
#include "netpolicy/resolver.hpp"

namespace motor::gate {
namespace {

// The host's first IPv4 nameserver: the one a job would use if it shared the host's network.
std::string host_nameserver() {
  std::istringstream conf(read_host("/etc/resolv.conf"));
  for (std::string line; std::getline(conf, line);) {
    std::istringstream words(line);
    std::string key, value;
    if (words >> key >> value && key == "nameserver" && value.find(':') == std::string::npos) return value;
  }
  return "192.0.2.53";
}

// Packets a named drop counter of the gate runner's egress ruleset counted; -1 if unreadable.
int64_t egress_drops(const AttackEnv& env, const std::string& counter) {
  const std::string path = "/run/netns/motor-eg-" + netpolicy::egress_tag(env.state_dir);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  if (!fd || !netpolicy::run_tool({"nft", "list", "counter", "inet", "motor_egress", counter}, fd.get(), "", &out)) return -1;
  const size_t at = out.find("packets ");
  return at == std::string::npos ? -1 : std::atoll(out.c_str() + at + 8);
}

UniqueFd uplink_netns(const AttackEnv& env) {
  UniqueFd fd;
  if (!env.config->outbound_uplink_netns.empty())
    fd.reset(open(("/run/netns/" + env.config->outbound_uplink_netns).c_str(), O_RDONLY | O_CLOEXEC));
  return fd;
}

// Where the gate listens for what gets through: on the host's own addresses, or in a namespace
// of its own behind the uplink that only the gate runner's jobs reach.
enum class Listen { kOnUplink, kBehindUplink };

// Every target must time out, nothing may arrive at the gate's listeners, and the named drop
// counter must have grown by at least one packet per target.
Verdict outbound_connects(AttackEnv& env, const Attack& a, const std::string& counter, Listen where,
                          const std::vector<std::string>& hosts) {
  if (hosts.empty()) return inconclusive("no target addresses found");
  const std::string& uplink = env.config->outbound_uplink_netns;
  auto listeners = where == Listen::kOnUplink
                       ? ArrivalListeners::on_uplink(uplink, hosts)
                       : ArrivalListeners::behind_uplink(uplink, netpolicy::egress_tag(env.state_dir), hosts);
  if (!listeners) return inconclusive("the gate could not make its listeners: " + listeners.error().message);
  std::string targets, sends;
  std::vector<Expect> expects;
  for (const auto& h : hosts) {
    targets += fmt::format("({}, 80), ", py(h));
    sends += fmt::format("({}, {}), ", py(h), (*listeners)->port());
    expects.push_back({fmt::format("tcp {}:80", h), {"timeout"}});
  }
  const int64_t before = egress_drops(env, counter);
  Verdict v = judge_lines(run_probe(env, a, "SENDS = [" + sends + "]\nTARGETS = [" + targets + "]\n"), expects);
  const int64_t after = egress_drops(env, counter);
  if (const auto arrived = (*listeners)->arrived(); !arrived.empty())
    return through(fmt::format("datagrams from the job arrived at the gate's listeners on {} (port {}); {}",
                               fmt::join(arrived, ", "), (*listeners)->port(), v.evidence));
  if (v.result != Result::kStopped) return v;
  if (before < 0 || after - before < static_cast<int64_t>(hosts.size()))
    return through(fmt::format("the connects timed out but the policy's {} counter went {} -> {}: something else "
                               "stopped them; {}", counter, before, after, v.evidence));
  v.evidence += fmt::format("; {} counted {} more packets; nothing arrived at the gate's UDP listeners (port {})", counter,
                            after - before, (*listeners)->port());
  return v;
}

// Asks the upstream resolver (from the uplink namespace, as the runner does) for `name`; its
// A addresses, or none.
std::vector<uint32_t> upstream_addresses(const AttackEnv& env, const std::string& name) {
  std::vector<Ipv4> servers;
  for (const auto& r : env.config->outbound_resolvers) servers.push_back(*parse_ipv4(r));
  if (servers.empty()) servers = netpolicy::resolv_conf_nameservers(read_host("/etc/resolv.conf"));
  if (servers.empty()) return {};
  UniqueFd uplink = uplink_netns(env);
  auto sock = netpolicy::socket_in_netns(uplink ? uplink.get() : -1, SOCK_DGRAM);
  auto q = netpolicy::make_dns_query(0x5a5a, name);
  auto parsed = q ? netpolicy::parse_dns_query(*q) : Expected<netpolicy::DnsQuery>(make_error("dns", "bad name"));
  if (!sock || !parsed) return {};
  const UniqueFd& s = *sock;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  to.sin_addr.s_addr = htonl(servers[0]);
  timeval tv{2, 0};
  setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 || send(s.get(), q->data(), q->size(), 0) < 0) return {};
  std::string buf(65535, '\0');
  const ssize_t n = recv(s.get(), buf.data(), buf.size(), 0);
  if (n <= 0) return {};
  auto out = netpolicy::filter_dns_response(std::string_view(buf.data(), static_cast<size_t>(n)), *parsed, 0x5a5a,
                                            [](uint32_t) { return false; }, 65535);
  return out ? netpolicy::dns_answer_addresses(*out) : std::vector<uint32_t>{};
}

// Whether a result value ('a.b.c.d', ... in quotes) holds an address the policy drops.
bool names_a_blocked_address(const std::string& value, const netpolicy::EgressPolicy& policy) {
  for (size_t at = 0; (at = value.find('\'', at)) != std::string::npos;) {
    const size_t end = value.find('\'', at + 1);
    if (end == std::string::npos) break;
    if (auto addr = parse_ipv4(value.substr(at + 1, end - at - 1)); addr && policy.drops(*addr)) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace

Verdict host_loopback(AttackEnv& env, const Attack& a) {
  auto r = run_probe(env, a, fmt::format("PORT = {}\n", env.listener_port));
  const std::string label = fmt::format("connect 127.0.0.1:{}", env.listener_port);
  Verdict v = judge_lines(r, {{label, {"ECONNREFUSED", "ENETUNREACH"}}, {"interfaces", {"lo"}}});
  // Whatever the job printed: did the host's listener get a connection?
  const int c = accept4(env.listener_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (c >= 0) {
    close(c);
    return through("the gate's host listener accepted a connection from the job; " + v.evidence);
  }
  return v;
}

Verdict dns(AttackEnv& env, const Attack& a) {
  const std::string ns = host_nameserver();
  auto r = run_probe(env, a, "NS = " + py(ns) + "\n");
  // A loopback resolver address reaches the job's own (empty) loopback: refused. Any other is
  // unreachable from a namespace that has only lo.
  const bool loopback = ns.rfind("127.", 0) == 0;
  const std::vector<std::string> sig = {loopback ? "ECONNREFUSED" : "ENETUNREACH"};
  return judge_lines(r, {{"getaddrinfo example.com", {"EAI(*"}},
                         {"udp query to the host resolver", sig},
                         {"tcp connect to the host resolver", sig}},
                     a.info);
}

Verdict outbound_ranges(AttackEnv& env, const Attack& a) {
  return outbound_connects(env, a, "blocked_drops", Listen::kBehindUplink,
                           {"10.0.0.1", "100.64.0.1", "169.254.169.254", "172.16.0.1", "192.0.0.1", "192.0.2.1",
                            "192.168.0.1", "198.18.0.1", "198.51.100.1", "203.0.113.1"});
}

// The uplink namespace's own IPv4 addresses (not loopback) and its gateways.
Verdict outbound_host(AttackEnv& env, const Attack& a) {
  std::vector<std::string> hosts;
  UniqueFd fd = uplink_netns(env);
  if (auto addrs = netpolicy::namespace_addresses(fd.get())) {
    for (Ipv4 addr : *addrs) {
      if ((addr >> 24) != 127) hosts.push_back(format_ipv4(addr));
    }
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return outbound_connects(env, a, "host_drops", Listen::kOnUplink, hosts);
}

Verdict outbound_dns_private(AttackEnv& env, const Attack& a) {
  const netpolicy::EgressPolicy policy;
  std::vector<std::string> names;
  for (const std::string& n : {std::string("localhost"), std::string("metadata.google.internal"),
                               std::string("instance-data"), std::string("metadata"), env.host_hostname}) {
    if (n.empty()) continue;
    const auto addrs = upstream_addresses(env, n);
    if (std::any_of(addrs.begin(), addrs.end(), [&](uint32_t addr) { return policy.drops(addr); })) names.push_back(n);
  }
  if (names.empty())
    return Verdict{Result::kSkipped, "the upstream resolver answers none of the candidate names with a blocked address", true};
  std::vector<Expect> expects;
  for (const auto& n : names) expects.push_back({"resolve " + n, {"EAI(-5)", "EAI(-2)", "EAI(-3)"}});
  auto r = run_probe(env, a, "NAMES = " + py_list(names) + "\n");
  Verdict v = judge_lines(r, expects);
  if (v.result != Result::kGotThrough) return v;
  // Public addresses beside the stripped ones are fine: only a blocked address breaks it.
  for (const auto& [label, value] : parse_result_lines(r.out)) {
    if (names_a_blocked_address(value, policy)) return v;
  }
  return stopped("only addresses the policy allows were answered: " + v.evidence);
}

}  // namespace motor::gate
