#include "netpolicy/resolver.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/slow_call.hpp"
#include "base/log.hpp"
#include "netpolicy/egress.hpp"

namespace motor::netpolicy {

struct Resolver::TcpClient {
  Resolver* owner = nullptr;
  reactor::UvHandle<uv_tcp_t> conn;
  reactor::UvHandle<uv_timer_t> idle;
  sockaddr_in peer{};
  std::string in;
  size_t in_flight = 0;
  char buf[4096];
};

struct Resolver::Pending {
  Resolver* owner = nullptr;
  std::string message;  // the job's query as it came
  DnsQuery query;
  sockaddr_in from{};
  TcpClient* tcp = nullptr;  // null: answer over UDP to `from`
  size_t upstream_index = 0;
  uint16_t upstream_id = 0;
  // One per try (libuv handles are not reused after close).
  std::unique_ptr<reactor::UvHandle<uv_udp_t>> sock;
  std::unique_ptr<reactor::UvHandle<uv_timer_t>> timer;
};

namespace {

struct TcpWrite {
  uv_write_t req;
  std::string data;
};

char g_upstream_buf[65536];

uint16_t random_id() {
  uint16_t id = 0;
  if (getrandom(&id, sizeof id, GRND_NONBLOCK) != sizeof id) id = static_cast<uint16_t>(uv_hrtime());
  return id;
}

Ipv4 host_order(const sockaddr_in& a) { return ntohl(a.sin_addr.s_addr); }

}  // namespace

std::vector<Ipv4> resolv_conf_nameservers(std::string_view text) {
  std::vector<Ipv4> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    constexpr std::string_view kKey = "nameserver";
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    const size_t end = line.find_first_of(" \t#;\r");
    if (auto a = parse_ipv4(line.substr(0, end))) out.push_back(*a);
  }
  return out;
}

Resolver::Resolver(uv_loop_t* loop, netpolicy::EgressPolicy policy, Cidr job_subnet,
                   std::vector<Ipv4> upstreams, int uplink_netns_fd)
    : loop_(loop),
      policy_(std::move(policy)),
      job_subnet_(job_subnet),
      upstreams_(std::move(upstreams)),
      uplink_netns_fd_(uplink_netns_fd) {}

Resolver::~Resolver() = default;

Status Resolver::start(int egress_netns_fd) {
  auto udp = netpolicy::socket_in_netns(egress_netns_fd, SOCK_DGRAM | SOCK_NONBLOCK);
  if (!udp) return make_error(udp.error().code, "resolver: " + udp.error().message);
  auto tcp = netpolicy::socket_in_netns(egress_netns_fd, SOCK_STREAM | SOCK_NONBLOCK);
  if (!tcp) return make_error(tcp.error().code, "resolver: " + tcp.error().message);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(53);
  const int one = 1;
  setsockopt(tcp->get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(udp->get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) return sys_error("resolver: binding UDP port 53");
  if (bind(tcp->get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) return sys_error("resolver: binding TCP port 53");

  if (auto s = reactor::uv_status(udp_.init(this, uv_udp_init, loop_), "resolver: the UDP handle"); !s) return s;
  if (int rc = uv_udp_open(udp_.get(), udp->release()); rc != 0) return make_error("io", std::string("resolver: ") + uv_strerror(rc));
  const int recv_rc = uv_udp_recv_start(
      udp_.get(), [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = reactor::owner_of<Resolver>(h);
        *buf = self ? uv_buf_init(self->udp_buf_, sizeof self->udp_buf_) : uv_buf_init(nullptr, 0);
      },
      [](uv_udp_t* h, ssize_t n, const uv_buf_t* buf, const sockaddr* addr, unsigned) {
        auto* self = reactor::owner_of<Resolver>(h);
        if (!self || n <= 0 || !addr || addr->sa_family != AF_INET) return;
        self->on_query(std::string_view(buf->base, static_cast<size_t>(n)), *reinterpret_cast<const sockaddr_in*>(addr),
                       nullptr);
      });
  if (auto s = reactor::uv_status(recv_rc, "resolver: receiving on UDP port 53"); !s) return s;
  if (auto s = reactor::uv_status(tcp_.init(this, uv_tcp_init, loop_), "resolver: the TCP handle"); !s) return s;
  if (int rc = uv_tcp_open(tcp_.get(), tcp->release()); rc != 0) return make_error("io", std::string("resolver: ") + uv_strerror(rc));
  if (int rc = uv_listen(tcp_.stream(), 64, [](uv_stream_t* s, int status) {
        if (auto* self = reactor::owner_of<Resolver>(s); self && status == 0) self->accept_tcp();
      });
      rc != 0)
    return make_error("io", std::string("resolver: listen: ") + uv_strerror(rc));
  return {};
}

void Resolver::on_query(std::string_view message, const sockaddr_in& from, TcpClient* tcp) {
  // Only jobs: their addresses are in the jobs' subnet (the egress namespace drops the rest).
  const Ipv4 source = host_order(from);
  if (!job_subnet_.contains(source) || source - job_subnet_.base < 4) return;
  auto query = parse_dns_query(message);
  if (!query) return;  // not something to answer
  size_t same_job = 0;
  for (const auto& p : pending_) same_job += p->from.sin_addr.s_addr == from.sin_addr.s_addr;
  if (pending_.size() >= kMaxPending || same_job >= kMaxPendingPerJob) return;  // the client retries
  auto p = std::make_unique<Pending>();
  p->owner = this;
  p->message = std::string(message);
  p->query = std::move(*query);
  if (tcp) p->query.udp_limit = 65535;
  p->from = from;
  p->tcp = tcp;
  if (tcp) ++tcp->in_flight;
  pending_.push_back(std::move(p));
  try_upstream(*pending_.back());
}

Expected<int> Resolver::upstream_socket() {
  auto fd = netpolicy::socket_in_netns(uplink_netns_fd_, SOCK_DGRAM | SOCK_NONBLOCK);
  if (!fd) return fd.error();
  return fd->release();
}

void Resolver::try_upstream(Pending& p) {
  p.sock.reset();
  p.timer.reset();
  if (p.upstream_index >= upstreams_.size()) {
    answer(p, dns_failure(p.message, p.query));
    return finish(p);
  }
  const Ipv4 server = upstreams_[p.upstream_index++];
  auto fd = [&] {
    reactor::SlowCall timed("resolver: upstream socket", 2000);
    return upstream_socket();
  }();
  if (!fd) {
    log_warning("resolver: {}", fd.error().message);
    return try_upstream(p);
  }
  p.sock = std::make_unique<reactor::UvHandle<uv_udp_t>>();
  if (p.sock->init(&p, uv_udp_init, loop_) != 0 || uv_udp_open(p.sock->get(), *fd) != 0) {
    close(*fd);
    return try_upstream(p);
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  to.sin_addr.s_addr = htonl(server);
  p.upstream_id = random_id();
  const std::string out = with_dns_id(p.message, p.upstream_id);
  uv_buf_t buf = uv_buf_init(const_cast<char*>(out.data()), static_cast<unsigned>(out.size()));
  if (uv_udp_connect(p.sock->get(), reinterpret_cast<sockaddr*>(&to)) != 0 || uv_udp_try_send(p.sock->get(), &buf, 1, nullptr) < 0) {
    return try_upstream(p);
  }
  if (uv_udp_recv_start(
          p.sock->get(), [](uv_handle_t*, size_t, uv_buf_t* b) { *b = uv_buf_init(g_upstream_buf, sizeof g_upstream_buf); },
          [](uv_udp_t* h, ssize_t n, const uv_buf_t* b, const sockaddr*, unsigned) {
            auto* pending = reactor::owner_of<Pending>(h);
            if (!pending || n <= 0) return;
            pending->owner->on_upstream(*pending, std::string_view(b->base, static_cast<size_t>(n)));
          }) != 0) {
    return try_upstream(p);  // the answer could not be read: the next server
  }
  p.timer = std::make_unique<reactor::UvHandle<uv_timer_t>>();
  int rc = p.timer->init(&p, uv_timer_init, loop_);
  if (rc == 0) {
    rc = uv_timer_start(p.timer->get(), [](uv_timer_t* h) {
      if (auto* pending = reactor::owner_of<Pending>(h)) pending->owner->try_upstream(*pending);
    }, kUpstreamTimeoutMs, 0);
  }
  if (rc != 0) log_warning("resolver: no timeout for an upstream query ({}); it waits for its answer", uv_strerror(rc));
}

void Resolver::on_upstream(Pending& p, std::string_view response) {
  // Test build only (outbound-dns-filter): addresses the policy drops are answered to the job.
  const bool filter = !control_weakened("outbound-dns-filter");
  auto filtered = filter_dns_response(response, p.query, p.upstream_id,
                                      [this, filter](uint32_t a) { return filter && policy_.drops(a); }, p.query.udp_limit);
  if (!filtered) {
    // Dropped: a spoofed or broken answer never reaches the job. The timer moves on.
    log_warning("resolver: dropped an answer from upstream: {}", filtered.error().message);
    return;
  }
  answer(p, *filtered);
  finish(p);
}

void Resolver::answer(Pending& p, const std::string& message) {
  if (!p.tcp) {
    if (p.from.sin_port == 0) return;  // its TCP client left
    uv_buf_t buf = uv_buf_init(const_cast<char*>(message.data()), static_cast<unsigned>(message.size()));
    (void)uv_udp_try_send(udp_.get(), &buf, 1, reinterpret_cast<const sockaddr*>(&p.from));
    return;
  }
  auto* w = new TcpWrite;
  w->data.push_back(static_cast<char>(message.size() >> 8));
  w->data.push_back(static_cast<char>(message.size() & 0xFF));
  w->data += message;
  uv_buf_t buf = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
  if (uv_write(&w->req, p.tcp->conn.stream(), &buf, 1, [](uv_write_t* req, int) {
        delete reinterpret_cast<TcpWrite*>(req);
      }) != 0) {
    delete w;
  }
}

void Resolver::finish(Pending& p) {
  if (p.tcp && p.tcp->in_flight > 0) --p.tcp->in_flight;
  pending_.remove_if([&](const std::unique_ptr<Pending>& q) { return q.get() == &p; });
}

void Resolver::accept_tcp() {
  auto c = std::make_unique<TcpClient>();
  c->owner = this;
  if (c->conn.init(c.get(), uv_tcp_init, loop_) != 0 || uv_accept(tcp_.stream(), c->conn.stream()) != 0) return;
  int len = sizeof c->peer;
  if (tcp_clients_.size() >= kMaxTcp || uv_tcp_getpeername(c->conn.get(), reinterpret_cast<sockaddr*>(&c->peer), &len) != 0 ||
      c->peer.sin_family != AF_INET) {
    return;  // closed by c's destructor
  }
  // A client without its idle timer or its reads is not kept (closed by c's destructor).
  if (c->idle.init(c.get(), uv_timer_init, loop_) != 0 || !arm_idle(*c)) return;
  if (uv_read_start(
          c->conn.stream(), [](uv_handle_t* h, size_t, uv_buf_t* buf) {
            auto* client = reactor::owner_of<TcpClient>(h);
            *buf = client ? uv_buf_init(client->buf, sizeof client->buf) : uv_buf_init(nullptr, 0);
          },
          [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
            if (auto* client = reactor::owner_of<TcpClient>(s)) client->owner->on_tcp_read(*client, n, buf);
          }) != 0) {
    return;
  }
  tcp_clients_.push_back(std::move(c));
}

bool Resolver::arm_idle(TcpClient& c) {
  return uv_timer_start(c.idle.get(), [](uv_timer_t* h) {
    if (auto* client = reactor::owner_of<TcpClient>(h)) client->owner->close_tcp(*client);
  }, kTcpIdleMs, 0) == 0;
}

void Resolver::on_tcp_read(TcpClient& c, ssize_t n, const uv_buf_t* buf) {
  if (n < 0) return close_tcp(c);
  if (n == 0) return;
  if (!arm_idle(c)) return close_tcp(c);
  c.in.append(buf->base, static_cast<size_t>(n));
  while (c.in.size() >= 2) {
    const size_t len = (static_cast<size_t>(static_cast<uint8_t>(c.in[0])) << 8) | static_cast<uint8_t>(c.in[1]);
    if (len < 12) return close_tcp(c);
    if (c.in.size() < 2 + len) break;
    const std::string message = c.in.substr(2, len);
    c.in.erase(0, 2 + len);
    on_query(message, c.peer, &c);
  }
  if (c.in.size() > 2 + 65535) close_tcp(c);
}

void Resolver::close_tcp(TcpClient& c) {
  for (auto& p : pending_) {
    if (p->tcp == &c) p->tcp = nullptr, p->from.sin_port = 0;
  }
  // Its pending queries still finish; their answers go nowhere (port 0 is never sent to).
  tcp_clients_.remove_if([&](const std::unique_ptr<TcpClient>& x) { return x.get() == &c; });
}

}  // namespace motor::netpolicy
