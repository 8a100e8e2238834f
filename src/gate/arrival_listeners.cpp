#include "gate/arrival_listeners.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "motor/sys_error.hpp"
#include "netpolicy/egress.hpp"

namespace motor::gate {
namespace {

// The gate's routing table and rule priority in the uplink namespace; the rule comes after
// `local` (so the host's own addresses stay local) and before `main`.
constexpr uint32_t kTableBase = 0x6d670000;
constexpr const char* kRulePriority = "31000";

std::string canary_netns(const std::string& tag) { return "motor-gc-" + tag; }
std::string canary_veth(const std::string& tag) { return "mgc-" + tag; }
std::string table_of(const std::string& tag) {
  return std::to_string(kTableBase + (std::strtoul(tag.c_str(), nullptr, 16) & 0xffff));
}

std::vector<std::string> ip_in(const std::string& netns, std::vector<std::string> args) {
  std::vector<std::string> argv{"ip"};
  if (!netns.empty()) argv.insert(argv.end(), {"-n", netns});
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

UniqueFd open_netns(const std::string& name) {
  return name.empty() ? UniqueFd() : UniqueFd(open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC));
}

}  // namespace

Status ArrivalListeners::listen_on(int netns_fd, const std::vector<std::string>& addresses, bool skip_foreign) {
  for (const auto& a : addresses) {
    auto sock = netpolicy::socket_in_netns(netns_fd, SOCK_DGRAM | SOCK_NONBLOCK);
    if (!sock) return sock.error();
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port_);
    if (inet_pton(AF_INET, a.c_str(), &at.sin_addr) != 1) return make_error("internal", "not an IPv4 address: " + a);
    if (bind(sock->get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
      if (errno == EADDRNOTAVAIL && skip_foreign) continue;  // a gateway: not ours to listen on
      return sys_error("binding a listener to " + a);
    }
    if (port_ == 0) {
      socklen_t len = sizeof at;
      getsockname(sock->get(), reinterpret_cast<sockaddr*>(&at), &len);
      port_ = ntohs(at.sin_port);
    }
    listeners_.push_back({a, std::move(*sock), false});
  }
  return {};
}

Expected<std::unique_ptr<ArrivalListeners>> ArrivalListeners::on_uplink(const std::string& uplink_netns,
                                                                        const std::vector<std::string>& addresses) {
  std::unique_ptr<ArrivalListeners> l(new ArrivalListeners);
  UniqueFd up = open_netns(uplink_netns);
  if (!uplink_netns.empty() && !up) return sys_error("opening /run/netns/" + uplink_netns);
  if (auto s = l->listen_on(up.get(), addresses, true); !s) return s.error();
  return l;
}

Expected<std::unique_ptr<ArrivalListeners>> ArrivalListeners::behind_uplink(const std::string& uplink_netns, const std::string& tag,
                                                                            const std::vector<std::string>& addresses) {
  std::unique_ptr<ArrivalListeners> l(new ArrivalListeners);
  l->uplink_netns_ = uplink_netns;
  l->tag_ = tag;
  l->remove_route_namespace();  // whatever a killed gate left
  const std::string ns = canary_netns(tag), veth = canary_veth(tag), table = table_of(tag);
  if (auto s = netpolicy::run_tool({"ip", "netns", "add", ns}); !s) return s.error();
  if (auto s = netpolicy::run_tool(ip_in(uplink_netns, {"link", "add", "name", veth, "type", "veth", "peer", "name", "eth0", "netns", ns}));
      !s)
    return s.error();
  // In the uplink: only packets from the runner's egress veth, and only to these addresses.
  std::string up = fmt::format("link set {} up\nrule add iif {} lookup {} priority {}\n", veth, netpolicy::uplink_veth(tag), table,
                               kRulePriority);
  // The gate's namespace: the addresses on its end; answers (ARP) go back the way they came.
  std::string inside = "link set lo up\nlink set eth0 up\n";
  for (const auto& a : addresses) {
    up += fmt::format("route add {}/32 dev {} table {}\n", a, veth, table);
    inside += fmt::format("addr add {}/32 dev eth0\n", a);
  }
  inside += "route add default dev eth0\n";
  if (auto s = netpolicy::run_tool(ip_in(uplink_netns, {"-batch", "-"}), -1, up); !s) return s.error();
  if (auto s = netpolicy::run_tool(ip_in(ns, {"-batch", "-"}), -1, inside); !s) return s.error();
  UniqueFd fd = open_netns(ns);
  if (!fd) return sys_error("opening /run/netns/" + ns);
  if (auto s = l->listen_on(fd.get(), addresses, false); !s) return s.error();
  return l;
}

void ArrivalListeners::remove_route_namespace() {
  if (tag_.empty()) return;
  const std::string table = table_of(tag_);
  (void)netpolicy::run_tool(ip_in(uplink_netns_, {"rule", "del", "iif", netpolicy::uplink_veth(tag_), "lookup", table, "priority", kRulePriority}));
  (void)netpolicy::run_tool(ip_in(uplink_netns_, {"route", "flush", "table", table}));
  (void)netpolicy::run_tool({"ip", "netns", "del", canary_netns(tag_)});  // its veth goes with it
  (void)netpolicy::run_tool(ip_in(uplink_netns_, {"link", "del", canary_veth(tag_)}));
}

ArrivalListeners::~ArrivalListeners() {
  listeners_.clear();
  remove_route_namespace();
}

std::vector<std::string> ArrivalListeners::arrived() {
  std::vector<std::string> out;
  for (auto& l : listeners_) {
    char buf[64];
    while (recv(l.fd.get(), buf, sizeof buf, 0) >= 0) l.arrived = true;
    if (l.arrived) out.push_back(l.address);
  }
  return out;
}

}  // namespace motor::gate
