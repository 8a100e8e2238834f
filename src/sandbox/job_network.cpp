#include "sandbox/job_network.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/route.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "motor/test_switches.hpp"

namespace motor::sandbox {
namespace {

// Appends a netlink attribute; returns its offset (for nesting).
size_t put_attr(std::vector<uint8_t>& buf, uint16_t type, const void* data, size_t len) {
  const size_t at = buf.size();
  nlattr a{};
  a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
  a.nla_type = type;
  buf.resize(at + NLA_ALIGN(NLA_HDRLEN + len), 0);
  std::memcpy(buf.data() + at, &a, sizeof a);
  if (len) std::memcpy(buf.data() + at + NLA_HDRLEN, data, len);
  return at;
}

void end_nest(std::vector<uint8_t>& buf, size_t at) {
  const uint16_t len = static_cast<uint16_t>(buf.size() - at);
  std::memcpy(buf.data() + at, &len, sizeof len);
}

void put_ifinfo(std::vector<uint8_t>& buf) {
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  const size_t at = buf.size();
  buf.resize(at + NLMSG_ALIGN(sizeof ifi), 0);
  std::memcpy(buf.data() + at, &ifi, sizeof ifi);
}

int write_sysctl(const char* path, const char*& stage) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    stage = "network: opening an IPv6 sysctl";
    return errno;
  }
  const bool ok = write(fd, "1", 1) == 1;
  const int err = errno;
  close(fd);
  if (!ok) {
    stage = "network: disabling IPv6";
    return err;
  }
  return 0;
}

int set_address(int sock, const char* ifname, Ipv4 address, int prefix, const char*& stage) {
  ifreq req{};
  std::memcpy(req.ifr_name, ifname, IFNAMSIZ);
  auto* sin = reinterpret_cast<sockaddr_in*>(&req.ifr_addr);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(address);
  if (ioctl(sock, SIOCSIFADDR, &req) != 0) {
    stage = "network: SIOCSIFADDR";
    return errno;
  }
  sin->sin_addr.s_addr = htonl(~Cidr::host_mask(prefix));
  if (ioctl(sock, SIOCSIFNETMASK, &req) != 0) {
    stage = "network: SIOCSIFNETMASK";
    return errno;
  }
  if (ioctl(sock, SIOCGIFFLAGS, &req) != 0) {
    stage = "network: SIOCGIFFLAGS";
    return errno;
  }
  req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
  if (ioctl(sock, SIOCSIFFLAGS, &req) != 0) {
    stage = "network: SIOCSIFFLAGS up";
    return errno;
  }
  return 0;
}

// Runs the prepared RTM_NEWLINK and reads its acknowledgement.
int create_pair(const JobNetworkPlan& plan, const char*& stage) {
  const int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (nl < 0) {
    stage = "network: netlink socket";
    return errno;
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  int err = 0;
  if (sendto(nl, plan.newlink.data(), plan.newlink.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
    stage = "network: creating the veth pair";
    err = errno;
  } else {
    alignas(nlmsghdr) char reply[1024];
    const ssize_t n = recv(nl, reply, sizeof reply, 0);
    const auto* h = reinterpret_cast<const nlmsghdr*>(reply);
    stage = "network: creating the veth pair";
    if (n < 0) {
      err = errno;
    } else if (static_cast<size_t>(n) < NLMSG_HDRLEN + sizeof(nlmsgerr) || h->nlmsg_type != NLMSG_ERROR) {
      err = EPROTO;
    } else {
      const auto* e = reinterpret_cast<const nlmsgerr*>(reply + NLMSG_HDRLEN);
      err = -e->error;
    }
  }
  close(nl);
  return err;
}

}  // namespace

uint32_t slot_count(const Cidr& subnet) { return subnet.prefix >= 30 ? 0 : (uint32_t{1} << (32 - subnet.prefix)) / 4; }
Ipv4 slot_gateway(const Cidr& subnet, uint32_t slot) { return subnet.base + slot * 4 + 1; }
Ipv4 slot_job_address(const Cidr& subnet, uint32_t slot) { return subnet.base + slot * 4 + 2; }

Expected<JobNetworkPlan> plan_job_network(int egress_netns_fd, const Cidr& subnet, uint32_t slot) {
  if (egress_netns_fd < 0) return make_error("internal", "no egress namespace");
  if (slot == 0 || slot >= slot_count(subnet)) return make_error("internal", "network slot out of range");
  JobNetworkPlan plan;
  plan.egress_netns_fd = egress_netns_fd;
  std::strncpy(plan.job_ifname, "eth0", IFNAMSIZ - 1);
  const std::string egress = "mjv" + std::to_string(slot);
  std::strncpy(plan.egress_ifname, egress.c_str(), IFNAMSIZ - 1);
  plan.job_address = slot_job_address(subnet, slot);
  plan.gateway = slot_gateway(subnet, slot);
  plan.prefix = 30;
  use_egress_namespace(plan, egress_netns_fd);
  return plan;
}

void use_egress_namespace(JobNetworkPlan& plan, int egress_netns_fd) {
  plan.egress_netns_fd = egress_netns_fd;
  // RTM_NEWLINK eth0 type veth peer mjv<slot> in the egress namespace (by fd).
  std::vector<uint8_t>& b = plan.newlink;
  b.assign(NLMSG_HDRLEN, 0);
  put_ifinfo(b);
  put_attr(b, IFLA_IFNAME, plan.job_ifname, std::strlen(plan.job_ifname) + 1);
  const size_t linkinfo = put_attr(b, IFLA_LINKINFO, nullptr, 0);
  put_attr(b, IFLA_INFO_KIND, "veth", 5);
  const size_t data = put_attr(b, IFLA_INFO_DATA, nullptr, 0);
  const size_t peer = put_attr(b, VETH_INFO_PEER, nullptr, 0);
  put_ifinfo(b);
  put_attr(b, IFLA_IFNAME, plan.egress_ifname, std::strlen(plan.egress_ifname) + 1);
  const uint32_t fd = static_cast<uint32_t>(egress_netns_fd);
  put_attr(b, IFLA_NET_NS_FD, &fd, sizeof fd);
  end_nest(b, peer);
  end_nest(b, data);
  end_nest(b, linkinfo);
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(b.size());
  h.nlmsg_type = RTM_NEWLINK;
  h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  h.nlmsg_seq = 1;
  std::memcpy(b.data(), &h, sizeof h);
}

int attach_job_network(const JobNetworkPlan& plan, const char*& stage) {
  // No IPv6 for the job at all: not even on lo, and none on the interface created next.
  if (!control_weakened("outbound-ipv6")) {  // test build only: the job keeps IPv6 (::1, link-local)
    if (int err = write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", stage)) return err;
    if (int err = write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", stage)) return err;
  }
  if (int err = create_pair(plan, stage)) return err;

  const int own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (own < 0) {
    stage = "network: opening the job's namespace";
    return errno;
  }
  int err = 0;
  if (setns(plan.egress_netns_fd, CLONE_NEWNET) != 0) {
    stage = "network: entering the egress namespace";
    err = errno;
  } else {
    const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) {
      stage = "network: socket in the egress namespace";
      err = errno;
    } else {
      err = set_address(sock, plan.egress_ifname, plan.gateway, plan.prefix, stage);
      close(sock);
    }
    // Always back into the job's own namespace; a child that cannot get back never runs.
    if (setns(own, CLONE_NEWNET) != 0) {
      stage = "network: returning to the job's namespace";
      err = errno;
    }
  }
  close(own);
  if (err) return err;

  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) {
    stage = "network: socket";
    return errno;
  }
  err = set_address(sock, plan.job_ifname, plan.job_address, plan.prefix, stage);
  if (!err) {
    rtentry route{};
    auto* dst = reinterpret_cast<sockaddr_in*>(&route.rt_dst);
    auto* gw = reinterpret_cast<sockaddr_in*>(&route.rt_gateway);
    auto* mask = reinterpret_cast<sockaddr_in*>(&route.rt_genmask);
    dst->sin_family = gw->sin_family = mask->sin_family = AF_INET;
    gw->sin_addr.s_addr = htonl(plan.gateway);
    route.rt_flags = RTF_UP | RTF_GATEWAY;
    if (ioctl(sock, SIOCADDRT, &route) != 0) {
      stage = "network: default route";
      err = errno;
    }
  }
  close(sock);
  return err;
}

}  // namespace motor::sandbox
