// The outbound jobs' resolver (issue 9), served from the runner's loop on port 53 of the egress
// namespace (UDP and TCP), where every job's gateway address lives: a job's /etc/resolv.conf
// names its gateway. Each query is forwarded over UDP to the upstream resolvers from the uplink
// namespace, one fresh socket (random port, random id) per try; the answer is filtered
// (dns_filter.hpp) before the job sees it. A malformed or foreign answer is dropped; after every
// upstream failed or timed out the job gets SERVFAIL. Bounded: at most kMaxPending queries in
// flight (kMaxPendingPerJob per job address), kMaxTcp TCP clients, each idle-closed.
#pragma once

#include <uv.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"
#include "netpolicy/dns_filter.hpp"
#include "netpolicy/netpolicy.hpp"

namespace motor::netpolicy {

class Resolver {
 public:
  static constexpr size_t kMaxPending = 512;
  static constexpr size_t kMaxPendingPerJob = 64;
  static constexpr size_t kMaxTcp = 128;
  static constexpr uint64_t kUpstreamTimeoutMs = 2000;
  static constexpr uint64_t kTcpIdleMs = 10000;

  Resolver(uv_loop_t* loop, netpolicy::EgressPolicy policy, Cidr job_subnet, std::vector<Ipv4> upstreams,
           int uplink_netns_fd);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Opens the listening sockets inside `egress_netns_fd` (on this thread, then back).
  Status start(int egress_netns_fd);

  struct Pending;
  struct TcpClient;

 private:
  void on_query(std::string_view message, const sockaddr_in& from, TcpClient* tcp);
  void try_upstream(Pending& p);
  void on_upstream(Pending& p, std::string_view response);
  void answer(Pending& p, const std::string& message);
  void finish(Pending& p);
  void accept_tcp();
  void on_tcp_read(TcpClient& c, ssize_t n, const uv_buf_t* buf);
  void close_tcp(TcpClient& c);
  bool arm_idle(TcpClient& c);  // (re)starts its idle timer; false if libuv refused
  Expected<int> upstream_socket();

  uv_loop_t* loop_;
  netpolicy::EgressPolicy policy_;
  Cidr job_subnet_;
  std::vector<Ipv4> upstreams_;
  int uplink_netns_fd_;
  reactor::UvHandle<uv_udp_t> udp_;
  reactor::UvHandle<uv_tcp_t> tcp_;
  std::list<std::unique_ptr<Pending>> pending_;
  std::list<std::unique_ptr<TcpClient>> tcp_clients_;
  char udp_buf_[65536];
};

// The IPv4 nameservers of a resolv.conf text, in order.
std::vector<Ipv4> resolv_conf_nameservers(std::string_view text);

}  // namespace motor::netpolicy
