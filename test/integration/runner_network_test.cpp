// Outbound network for jobs (issue 9), attacked through real runners and real namespaces.
//
// Nothing here reaches the machine's real network. The runner's uplink is a namespace this test
// makes ("upstream", standing for the host): it holds addresses in every blocked range (on its
// lo), a "public" host address 198.51.100.1 and a default route via a "gateway" namespace at
// 198.51.100.254, which also holds the permitted destination 198.51.100.7 (allowed only by the
// test switch --test-allow-destination=198.51.100.0/24 of motor-runner-testing). dnsmasq (from
// Debian, started here, stopped by pid) answers in the upstream namespace; TCP and UDP
// listeners answer "HIT" on every address of both namespaces. Neither has a link to the outside.
//
// Each check runs from a real job (python3 in the sandbox, the probe below), in parallel.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "protocol/base64.hpp"
#include "netpolicy/outbound.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

constexpr int kPort = 8080;

// The probe: one "check = result" line per argument, checks run in parallel.
constexpr const char* kProbe = R"PY(
import socket, struct, sys, concurrent.futures as cf
T = 3.0
def tcp(h, p):
    s = socket.socket(); s.settimeout(T)
    try:
        s.connect((h, p)); d = s.recv(16)
        return "OK" if d.startswith(b"HIT") else "NODATA"
    except Exception as e: return "FAIL:" + type(e).__name__
def udp(h, p):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(T)
    try:
        s.sendto(b"ping", (h, p)); d, _ = s.recvfrom(16)
        return "OK" if d.startswith(b"HIT") else "NODATA"
    except Exception as e: return "FAIL:" + type(e).__name__
def nameserver():
    for l in open("/etc/resolv.conf"):
        if l.startswith("nameserver"): return l.split()[1]
def dns(kind, spec):
    name, _, qtype = spec.partition("/")
    q = struct.pack(">HHHHHH", 0x4d37, 0x0100, 1, 0, 0, 0)
    for label in name.split("."): q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", int(qtype or 1), 1)
    try:
        if kind == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(8)
            s.sendto(q, (nameserver(), 53)); r = s.recv(65535)
        else:
            s = socket.socket(); s.settimeout(8); s.connect((nameserver(), 53))
            s.sendall(struct.pack(">H", len(q)) + q)
            r = b""
            while len(r) < 2 or len(r) < 2 + struct.unpack(">H", r[:2])[0]:
                d = s.recv(65535)
                if not d: break
                r += d
            r = r[2:]
    except Exception as e: return "FAIL:" + type(e).__name__
    an = struct.unpack(">H", r[6:8])[0]; rcode = r[3] & 15
    i = 12
    while r[i]: i += r[i] + 1
    i += 5
    out = []
    for _ in range(an):
        while r[i]:
            if r[i] >= 0xC0: return "COMPRESSED"
            i += r[i] + 1
        i += 1
        t, c, ttl, n = struct.unpack(">HHIH", r[i:i+10]); i += 10
        if t == 1: out.append(socket.inet_ntoa(r[i:i+4]))
        if t == 28: out.append("AAAA")
        i += n
    return ",".join(sorted(out)) or ("none" if rcode == 0 else "rcode%d" % rcode)
def gai(name):
    try: return ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}))
    except socket.gaierror as e: return "none" if e.errno in (socket.EAI_NONAME, socket.EAI_NODATA) else "FAIL:%d" % e.errno
def ipv6():
    try: n = len(open("/proc/net/if_inet6").read())
    except OSError: n = 0
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try: s.connect(("::1", 9)); c = "OK"
    except OSError as e: c = "FAIL:" + type(e).__name__
    return "addresses=%d loopback=%s" % (n, c)
def links():
    return ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
def check(arg):
    kind, _, rest = arg.partition(":")
    if kind in ("tcp", "udp"):
        h, p = rest.rsplit(":", 1)
        return (tcp if kind == "tcp" else udp)(h, int(p))
    if kind in ("dnsudp", "dnstcp"): return dns(kind[3:], rest)
    if kind == "gai": return gai(rest)
    if kind == "ipv6": return ipv6()
    if kind == "links": return links()
    return "UNKNOWN"
with cf.ThreadPoolExecutor(max_workers=64) as ex:
    for arg, res in zip(sys.argv[1:], ex.map(check, sys.argv[1:])):
        print(arg + " = " + res, flush=True)
)PY";

std::map<std::string, std::string> parse_lines(const std::string& out) {
  std::map<std::string, std::string> m;
  size_t at = 0;
  while (at < out.size()) {
    size_t nl = out.find('\n', at);
    if (nl == std::string::npos) nl = out.size();
    const std::string line = out.substr(at, nl - at);
    if (auto eq = line.find(" = "); eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 3);
    at = nl + 1;
  }
  return m;
}

bool sh(const std::string& cmd) { return run_program({"/bin/sh", "-c", cmd}).exit_code == 0; }

// Runs `body` in a child process inside the named namespace; returns its pid.
template <typename F>
pid_t fork_in_netns(const std::string& netns, F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
    body();
    _exit(0);
  }
  return pid;
}

// TCP and UDP on 0.0.0.0:kPort: every address of the namespace answers "HIT".
void serve_hits() {
  const int t = socket(AF_INET, SOCK_STREAM, 0), u = socket(AF_INET, SOCK_DGRAM, 0);
  const int one = 1;
  setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(u, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);  // reply from the address asked
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  if (bind(t, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(t, 64) != 0 ||
      bind(u, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    _exit(125);
  for (;;) {
    pollfd fds[2] = {{t, POLLIN, 0}, {u, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[0].revents & POLLIN) {
      const int c = accept(t, nullptr, nullptr);
      if (c >= 0) {
        (void)!write(c, "HIT\n", 4);
        close(c);
      }
    }
    if (fds[1].revents & POLLIN) {
      char buf[512];
      alignas(cmsghdr) char control[256];
      sockaddr_in from{};
      iovec iov{buf, sizeof buf};
      msghdr msg{};
      msg.msg_name = &from;
      msg.msg_namelen = sizeof from;
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      if (recvmsg(u, &msg, 0) < 0) continue;
      char hit[] = "HIT";
      iov = {hit, 3};
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
          auto* info = reinterpret_cast<in_pktinfo*>(CMSG_DATA(c));
          info->ipi_spec_dst = info->ipi_addr;
          info->ipi_ifindex = 0;
        }
      }
      sendmsg(u, &msg, 0);
    }
  }
}

// A DNS server that answers every query with malformed messages only (same id and question, so
// only the parser can tell): a compression loop, a record running past the end, an A record of
// 5 bytes, a forward pointer, and noise.
void serve_malformed_dns(uint32_t address) {
  const int u = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(53);
  a.sin_addr.s_addr = htonl(address);
  if (bind(u, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(125);
  for (;;) {
    char q[512];
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const ssize_t n = recvfrom(u, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 17) continue;
    const std::string query(q, static_cast<size_t>(n));
    std::string head = query.substr(0, 12);
    head[2] = static_cast<char>(0x81);
    head[3] = static_cast<char>(0x80);
    head[6] = 0, head[7] = 1, head[10] = 0, head[11] = 0;
    const std::string question = query.substr(12, static_cast<size_t>(n) - 12 - (query[11] ? 11 : 0));
    const std::string a_rr_fixed = std::string("\x00\x01\x00\x01\x00\x00\x00\x3c", 8);
    const std::vector<std::string> answers = {
        head + question + std::string("\xc0") + static_cast<char>(12 + question.size()) + a_rr_fixed +
            std::string("\x00\x04\x5d\xb8\xd8\x22", 6),  // name points at itself
        head + question + std::string("\xc0\x0c", 2) + a_rr_fixed + std::string("\x00\x40\x5d\xb8", 4),  // runs past the end
        head + question + std::string("\xc0\x0c", 2) + a_rr_fixed + std::string("\x00\x05\x5d\xb8\xd8\x22\x01", 7),
        head + question + "\xc0\x7f" + a_rr_fixed + std::string("\x00\x04\x5d\xb8\xd8\x22", 6),  // forward pointer
        head.substr(0, 2) + std::string("\x81\x80\xff\xff\x00\x01", 6),
    };
    for (const auto& ans : answers) sendto(u, ans.data(), ans.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
  }
}

// Whether a TCP connect to `address`:kPort from inside `netns` succeeds.
bool connects_from(const std::string& netns, uint32_t address) {
  const pid_t pid = fork_in_netns(netns, [address] {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(kPort);
    a.sin_addr.s_addr = htonl(address);
    _exit(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : 1);
  });
  int status = -1;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void stop_pid(pid_t& pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  pid = -1;
}

constexpr const char* kHostPublic = "93.184.216.99";  // on the test uplink's lo

class RunnerNetwork : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0 || access("/usr/sbin/nft", X_OK) != 0 || access("/usr/sbin/dnsmasq", X_OK) != 0 ||
        access("/usr/bin/python3", X_OK) != 0)
      return;
    const std::string m = unique_marker();
    up_ = "mt9-up-" + m;
    gw_ = "mt9-gw-" + m;
    dir_ = make_temp_dir();
    bool ok = sh("ip netns add " + up_) && sh("ip netns add " + gw_);
    const std::string u = "ip -n " + up_ + " ", g = "ip -n " + gw_ + " ";
    ok = ok && sh(u + "link set lo up") && sh(g + "link set lo up") &&
         sh(u + "link add name tgw type veth peer name eth0 netns " + gw_) &&
         sh(u + "addr add 198.51.100.1/24 dev tgw") && sh(u + "link set tgw up") &&
         sh(g + "addr add 198.51.100.254/24 dev eth0") && sh(g + "link set eth0 up") &&
         sh(g + "addr add 198.51.100.7/32 dev lo") && sh(u + "route add default via 198.51.100.254") &&
         sh(g + "route add default via 198.51.100.1");
    for (const char* a : {"10.9.9.9", "100.64.9.9", "169.254.169.254", "172.16.9.9", "192.0.0.9", "192.0.2.9", "192.168.9.9",
                          "198.18.9.9", "203.0.113.9", "10.53.53.53", "10.66.66.66"})
      ok = ok && sh(u + "addr add " + std::string(a) + "/32 dev lo");
    // A public-range address of the host (the uplink namespace): only the host rule keeps jobs from it.
    ok = ok && sh(u + "addr add " + std::string(kHostPublic) + "/32 dev lo");
    // dnsmasq in the foreground, as this process's child: stopped and reaped by its pid.
    const std::string pid_file = dir_ + "/dnsmasq.pid";
    if (ok) {
      dnsmasq_pid_ = fork_in_netns(up_, [pid_file] {
        std::vector<std::string> args = {
            "/usr/sbin/dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--listen-address=10.53.53.53",
            "--bind-interfaces", "--pid-file=" + pid_file, "--host-record=public.test,93.184.216.34",
            "--host-record=private.test,10.1.2.3", "--host-record=mixed.test,10.1.2.3",
            "--host-record=mixed.test,93.184.216.35", "--host-record=meta.test,169.254.169.254",
            "--host-record=hostaddr.test,198.51.100.1", "--host-record=allowed.test,198.51.100.7",
            "--host-record=v6.test,2001:db8::1", "--cname=alias.test,mixed.test",
            "--host-record=metadata.google.internal,169.254.169.254"};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
      });
    }
    for (int i = 0; ok && i < 200 && read_file(pid_file).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ok = ok && !read_file(pid_file).empty();
    hits_up_ = fork_in_netns(up_, serve_hits);
    hits_gw_ = fork_in_netns(gw_, serve_hits);
    bad_dns_ = fork_in_netns(up_, [] { serve_malformed_dns(0x0A424242); });
    // Both listeners are up before any test (each reached from the other namespace).
    bool listening = false;
    for (int i = 0; ok && i < 200 && !(listening = connects_from(gw_, 0x0A090909) && connects_from(up_, 0xC6336407)); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ready_ = ok && dnsmasq_pid_ > 0 && listening;
  }

  static void TearDownTestSuite() {
    stop_pid(dnsmasq_pid_);
    stop_pid(hits_up_);
    stop_pid(hits_gw_);
    stop_pid(bad_dns_);
    if (!gw_.empty()) sh("ip netns del " + gw_);
    if (!up_.empty()) sh("ip netns del " + up_);
    if (!dir_.empty()) remove_tree(dir_);
  }

  void SetUp() override {
    MOTOR_REQUIRE(geteuid() == 0, "needs root");
    MOTOR_REQUIRE(access("/usr/sbin/nft", X_OK) == 0 && access("/usr/sbin/dnsmasq", X_OK) == 0,
                  "needs nft and dnsmasq (scripts/setup installs nftables and dnsmasq-base)");
    MOTOR_REQUIRE(access("/usr/bin/python3", X_OK) == 0, "needs python3 for the job-side probe");
    ASSERT_TRUE(ready_) << "the test namespaces could not be built";
  }

  // An outbound-enabled runner on the test uplink (motor-runner-testing, 198.51.100.0/24 allowed).
  std::unique_ptr<RunnerProcess> outbound_runner(const std::string& resolvers = "10.53.53.53") {
    auto r = std::make_unique<RunnerProcess>(fmt::format(
        "outbound_network = true\noutbound_uplink_netns = {}\noutbound_resolvers = {}\n", up_, resolvers));
    r->use_binary(MOTOR_RUNNER_TESTING_BIN, {"--test-allow-destination=198.51.100.0/24"});
    return r;
  }

  std::map<std::string, std::string> probe(const RunnerProcess& r, const std::vector<std::string>& checks,
                                           const std::string& network = "outbound", std::string* raw = nullptr) {
    std::vector<std::string> args{"run", "--network", network, "--", "/usr/bin/python3", "-c", kProbe};
    args.insert(args.end(), checks.begin(), checks.end());
    auto res = r.client(args);
    if (raw) *raw = res.out + res.err;
    EXPECT_EQ(res.exit_code, 0) << res.out << res.err << r.log();
    return parse_lines(res.out);
  }

  static std::string egress_netns(const RunnerProcess& r) { return "motor-eg-" + netpolicy::egress_tag(r.state_dir()); }
  static bool exists(const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0;
  }
  // Job-side veths in the egress namespace.
  static std::string job_links(const RunnerProcess& r) {
    auto res = run_program({"/usr/sbin/ip", "-n", egress_netns(r), "-br", "link", "show"});
    std::string out;
    size_t at = 0;
    while ((at = res.out.find("mjv", at)) != std::string::npos) {
      out += res.out.substr(at, res.out.find_first_of("@ ", at) - at) + " ";
      at += 3;
    }
    return out;
  }

  static inline std::string up_, gw_, dir_;
  static inline pid_t dnsmasq_pid_ = -1, hits_up_ = -1, hits_gw_ = -1, bad_dns_ = -1;
  static inline bool ready_ = false;
};

// Control: the egress ruleset's drop rules (blocked ranges, host addresses and gateway) and the
// forward chain's "replies only" rule. Every blocked target holds a live listener that answers
// from the upstream namespace itself (checked first), so only the policy stops the job.
TEST_F(RunnerNetwork, OutboundJobReachesThePublicInternetOnly) {
  // The listeners answer to anyone inside the test namespaces: without the policy, the job would.
  ASSERT_TRUE(connects_from(gw_, 0x0A090909)) << "the blocked-range listener (10.9.9.9) is not reachable at all";

  auto r = outbound_runner();
  ASSERT_TRUE(r->start()) << r->log();
  const std::vector<std::string> blocked = {"10.9.9.9",   "100.64.9.9",  "169.254.169.254", "172.16.9.9",
                                            "192.0.0.9",  "192.0.2.9",   "192.168.9.9",     "198.18.9.9",
                                            "203.0.113.9", "127.0.0.1",  "100.88.0.1",      "0.0.0.9"};
  const std::vector<std::string> host = {"198.51.100.1", "198.51.100.254"};  // the host and its gateway
  std::vector<std::string> checks;
  for (const auto& list : {blocked, host}) {
    for (const auto& a : list) {
      checks.push_back(fmt::format("tcp:{}:{}", a, kPort));
      checks.push_back(fmt::format("udp:{}:{}", a, kPort));
    }
  }
  checks.push_back(fmt::format("tcp:198.51.100.7:{}", kPort));
  checks.push_back(fmt::format("udp:198.51.100.7:{}", kPort));
  checks.push_back(fmt::format("udp:224.0.0.9:{}", kPort));
  std::string raw;
  auto p = probe(*r, checks, "outbound", &raw);
  EXPECT_EQ(p[fmt::format("tcp:198.51.100.7:{}", kPort)], "OK") << raw;
  EXPECT_EQ(p[fmt::format("udp:198.51.100.7:{}", kPort)], "OK") << raw;
  for (const auto& c : checks) {
    if (c.find("198.51.100.7") != std::string::npos) continue;
    EXPECT_TRUE(p.count(c) && p[c].rfind("FAIL", 0) == 0) << c << " -> " << p[c] << "\n" << raw;
  }
  // The terminal record says which network the job had.
  auto res = r->client({"run", "--json", "--network", "outbound", "--", "/bin/true"});
  EXPECT_NE(res.out.find("\"network\":\"outbound\""), std::string::npos) << res.out;
}

// Control: the job's IPv6 sysctls (job_network.cpp) and the ruleset's IPv6 drop.
TEST_F(RunnerNetwork, OutboundJobHasNoIpv6AndOfflineJobOnlyLoopback) {
  auto r = outbound_runner();
  ASSERT_TRUE(r->start()) << r->log();
  auto p = probe(*r, {"ipv6", "links"});
  EXPECT_EQ(p["ipv6"], "addresses=0 loopback=FAIL:OSError");
  EXPECT_EQ(p["links"], "eth0,lo");
  // An offline job on the same runner: loopback only, nothing reachable, no resolver.
  auto off = probe(*r, {"links", fmt::format("tcp:198.51.100.7:{}", kPort), "gai:public.test"}, "offline");
  EXPECT_EQ(off["links"], "lo");
  EXPECT_EQ(off[fmt::format("tcp:198.51.100.7:{}", kPort)], "FAIL:OSError");
  EXPECT_EQ(off["gai:public.test"], "none");
}

// The job starter (sandbox/job_starter.hpp) starts outbound jobs too: the runner passes it the
// egress namespace's fd with the request. Seen by the job's network namespace: one the starter
// held in its pool, which only the starter has (a job the runner starts itself gets a new one).
TEST_F(RunnerNetwork, OutboundJobsAreStartedByTheJobStarter) {
  auto r = outbound_runner();
  ASSERT_TRUE(r->start()) << r->log();
  const pid_t starter = job_starter_of(r->pid());
  ASSERT_GT(starter, 0) << "no motor-starter process under the runner";
  const auto pool = full_pool(starter, 4, std::filesystem::read_symlink(fmt::format("/proc/{}/ns/net", r->pid())).string());
  ASSERT_EQ(pool.size(), 4u) << "the pool never filled";
  auto res = r->client({"run", "--network", "outbound", "--", "/bin/sh", "-c", "readlink /proc/self/ns/net; ls /proc/sys/net/ipv4/conf"});
  ASSERT_EQ(res.exit_code, 0) << res.out << res.err << r->log();
  const std::string job_ns = res.out.substr(0, res.out.find('\n'));
  EXPECT_TRUE(pool.count(job_ns)) << job_ns << " was not in the starter's pool: the runner started the job itself";
  EXPECT_NE(res.out.find("\neth0\n"), std::string::npos) << "no outbound interface: " << res.out;
}

// Control: the resolver's answer filter (dns_filter.cpp), over UDP and TCP.
TEST_F(RunnerNetwork, ResolverRemovesAddressesThePolicyDrops) {
  auto r = outbound_runner();
  ASSERT_TRUE(r->start()) << r->log();
  std::vector<std::string> checks;
  for (const char* kind : {"dnsudp", "dnstcp"}) {
    for (const char* name : {"public.test", "private.test", "mixed.test", "meta.test", "hostaddr.test", "allowed.test",
                             "v6.test/28", "alias.test"})
      checks.push_back(fmt::format("{}:{}", kind, name));
  }
  checks.push_back("gai:mixed.test");
  checks.push_back("gai:v6.test");
  std::string raw;
  auto p = probe(*r, checks, "outbound", &raw);
  for (const char* kind : {"dnsudp", "dnstcp"}) {
    auto at = [&](const char* name) { return p[fmt::format("{}:{}", kind, name)]; };
    EXPECT_EQ(at("public.test"), "93.184.216.34") << raw;
    EXPECT_EQ(at("private.test"), "none") << raw;
    EXPECT_EQ(at("mixed.test"), "93.184.216.35") << raw;
    EXPECT_EQ(at("alias.test"), "93.184.216.35") << raw;  // through a CNAME, decompressed
    EXPECT_EQ(at("meta.test"), "none") << raw;
    EXPECT_EQ(at("hostaddr.test"), "none") << raw;       // the host's own address
    EXPECT_EQ(at("allowed.test"), "198.51.100.7") << raw;  // what the policy lets through
    EXPECT_EQ(at("v6.test/28"), "none") << raw;  // the AAAA record is removed
  }
  EXPECT_EQ(p["gai:mixed.test"], "93.184.216.35") << raw;
  EXPECT_EQ(p["gai:v6.test"], "none") << raw;  // AAAA removed: no IPv6 for the job
}

// Control: bounds-checked parsing; a malformed answer is dropped, the job gets SERVFAIL once the
// upstream timed out, and the runner keeps serving.
TEST_F(RunnerNetwork, MalformedUpstreamAnswersAreDroppedWithoutHarm) {
  auto r = outbound_runner("10.66.66.66");
  ASSERT_TRUE(r->start()) << r->log();
  std::thread job([&] {
    auto p = probe(*r, {"dnsudp:public.test", "dnstcp:public.test"});
    EXPECT_EQ(p["dnsudp:public.test"], "rcode2");
    EXPECT_EQ(p["dnstcp:public.test"], "rcode2");
  });
  // While the queries wait on the bad upstream, the runner answers at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  auto status = r->client({"status"}, std::chrono::seconds(5));
  EXPECT_EQ(status.exit_code, 0) << status.err;
  job.join();
  EXPECT_GT(kill(r->pid(), 0), -1);
  EXPECT_NE(r->log().find("resolver: dropped an answer from upstream: malformed DNS message"), std::string::npos) << r->log();
}

// Control: the egress forward chain passes only replies towards a job. The attacker here holds
// the uplink namespace (the host) and even routes the jobs' subnet into the egress namespace.
TEST_F(RunnerNetwork, NothingFromOutsideOpensAConnectionIntoTheJob) {
  auto r = outbound_runner();
  ASSERT_TRUE(r->start()) << r->log();
  ASSERT_TRUE(sh(fmt::format("ip -n {} route replace 100.88.0.0/16 via 100.88.0.2", up_)));
  constexpr const char* kListen = R"PY(
import socket
t = socket.socket(); t.bind(("0.0.0.0", 8081)); t.listen(8); t.settimeout(5)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 8081)); u.settimeout(0.1)
try: t.accept(); print("tcp = ACCEPTED")
except OSError: print("tcp = none")
try: u.recvfrom(64); print("udp = RECEIVED")
except OSError: print("udp = none")
)PY";
  std::map<std::string, std::string> p;
  std::thread job([&] { p = parse_lines(r->client({"run", "--network", "outbound", "--", "/usr/bin/python3", "-c", kListen}).out); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // The first job on a fresh runner has slot 1: 100.88.0.6.
  int status = -1;
  const pid_t attacker = fork_in_netns(up_, [] {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(8081);
    a.sin_addr.s_addr = htonl(0x64580006);
    const int u = socket(AF_INET, SOCK_DGRAM, 0);
    for (int i = 0; i < 5; ++i) sendto(u, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const int t = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{2, 0};
    setsockopt(t, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    _exit(connect(t, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : 1);
  });
  waitpid(attacker, &status, 0);
  job.join();
  sh(fmt::format("ip -n {} route del 100.88.0.0/16", up_));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "the connection into the job was made";
  EXPECT_EQ(p["tcp"], "none");
  EXPECT_EQ(p["udp"], "none");
}

// The four outbound gate attacks (ids) and their controls' test switches, in the same order.
constexpr std::array<const char*, 4> kOutboundAttacks = {"net-outbound-ranges", "net-outbound-host", "net-outbound-ipv6",
                                                          "net-outbound-dns-private"};

// Runs `gate --attack <the outbound attacks>` with outbound enabled on the test uplink, through
// `motor-runner` (no switch) or `motor-runner-testing --test-weaken=NAME`, or (`gate_program`)
// another gate such as `motor-bb-runner gate --runner motor-runner`; each attack's result.
std::map<std::string, std::string> gate_outbound(const std::string& up, const std::string& weaken = "",
                                                 const std::vector<std::string>& gate_program = {}) {
  const std::string dir = make_temp_dir();
  chmod(dir.c_str(), 0711);
  const std::string conf = dir + "/runner.conf";
  write_file(conf, fmt::format("cgroup_parent = motor-gate9-{}\noutbound_network = true\noutbound_uplink_netns = {}\n"
                               "outbound_resolvers = 10.53.53.53\n",
                               getpid(), up));
  std::vector<std::string> args{weaken.empty() ? MOTOR_RUNNER_BIN : MOTOR_RUNNER_TESTING_BIN};
  if (!weaken.empty()) args.push_back("--test-weaken=" + weaken);
  args.push_back("gate");
  if (!gate_program.empty()) args = gate_program;
  for (const char* a : {"--config", conf.c_str()}) args.push_back(a);
  for (const std::string& a : {std::string("--state-dir"), dir + "/state", std::string("--json"), std::string("--attack"),
                               fmt::format("{}", fmt::join(kOutboundAttacks, ","))})
    args.push_back(a);
  auto res = run_program(args, {}, std::chrono::seconds(600));
  std::map<std::string, std::string> results;
  for (const char* id : kOutboundAttacks) {
    const size_t at = res.out.find(fmt::format("\"id\":\"{}\"", id));
    EXPECT_NE(at, std::string::npos) << id << "\n" << res.out.substr(0, 4000) << res.err;
    if (at == std::string::npos) continue;
    const std::string entry = res.out.substr(at, res.out.find('}', at) - at);
    const size_t r = entry.find("\"result\":\"");
    results[id] = r == std::string::npos ? entry : entry.substr(r + 10, entry.find('"', r + 10) - r - 10);
    if (results[id] != "stopped") results[id] += " | " + entry;  // the evidence, when it fails
  }
  struct stat st {};
  const std::string tag = netpolicy::egress_tag(dir + "/state");
  EXPECT_NE(stat(("/run/netns/motor-eg-" + tag).c_str(), &st), 0) << "egress left behind";
  // The gate's listener namespace and its routing rule in the uplink (gate/arrival_listeners.hpp).
  EXPECT_NE(stat(("/run/netns/motor-gc-" + tag).c_str(), &st), 0) << "the gate's listener namespace left behind";
  const auto rules = run_program({"/usr/sbin/ip", "-n", up, "rule", "show"});
  EXPECT_EQ(rules.out.find("meg-" + tag), std::string::npos) << "the gate's rule left behind: " << rules.out;
  remove_tree(dir);
  return results;
}

// `motor-runner gate` (the installed binary: no test switch) with outbound enabled on the test
// uplink: each outbound attack is stopped, and by the policy's own drop rule (its counter).
TEST_F(RunnerNetwork, GateOutboundAttacksAreStopped) {
  const auto results = gate_outbound(up_);
  for (const char* id : kOutboundAttacks) EXPECT_EQ(results.count(id) ? results.at(id) : "", "stopped") << id;
}

// The same attacks sent as bb_worker sends an action whose platform asks for outbound network:
// a Run on motor-bb-runner's outbound socket (docs/buildbarn.md, "Network").
TEST_F(RunnerNetwork, GateOutboundAttacksThroughMotorBbRunnerAreStopped) {
#ifdef MOTOR_BB_RUNNER_BIN
  const auto results = gate_outbound(up_, "", {MOTOR_BB_RUNNER_BIN, "gate", "--runner", MOTOR_RUNNER_BIN});
  for (const char* id : kOutboundAttacks) EXPECT_EQ(results.count(id) ? results.at(id) : "", "stopped") << id;
#else
  MOTOR_REQUIRE(false, "motor-bb-runner is not built (gRPC's development packages are missing)");
#endif
}

// The gate can fail: with one outbound control weakened (motor-runner-testing --test-weaken),
// exactly its attack reports GOT THROUGH and the other outbound attacks are still stopped. These
// are the outbound rows of gate_test.cpp's GateWeakened table (they need this fixture's uplink).
class RunnerNetworkWeakened : public RunnerNetwork {
 protected:
  // `evidence`: what the GOT THROUGH verdict must say (e.g. that a packet arrived at a listener).
  void expect_only_through(const std::string& weaken, const std::string& through, const std::string& evidence = "") {
    const auto results = gate_outbound(up_, weaken);
    for (const char* id : kOutboundAttacks) {
      const std::string result = results.count(id) ? results.at(id) : "";
      if (id == through) {
        EXPECT_EQ(result.substr(0, 11), "got_through") << weaken << ": " << id << ": " << result;
        EXPECT_NE(result.find(evidence), std::string::npos) << weaken << ": " << id << ": " << result;
      } else
        EXPECT_EQ(result, "stopped") << weaken << ": " << id;
    }
  }
};

TEST_F(RunnerNetworkWeakened, OutboundRangesLetsTheRangesAttackThrough) {
  // The gate's own listeners behind the uplink (169.254.169.254 is an address of the test uplink:
  // the host rule drops it first).
  expect_only_through("outbound-ranges", "net-outbound-ranges", "arrived at the gate's listeners on 10.0.0.1, 100.64.0.1, 172.16.0.1");
}
TEST_F(RunnerNetworkWeakened, OutboundHostLetsTheHostAttackThrough) {
  expect_only_through("outbound-host", "net-outbound-host", fmt::format("arrived at the gate's listeners on {}", kHostPublic));
}
TEST_F(RunnerNetworkWeakened, OutboundIpv6LetsTheIpv6AttackThrough) {
  expect_only_through("outbound-ipv6", "net-outbound-ipv6");
}
TEST_F(RunnerNetworkWeakened, OutboundDnsFilterLetsTheDnsPrivateAttackThrough) {
  expect_only_through("outbound-dns-filter", "net-outbound-dns-private");
}

TEST_F(RunnerNetwork, OutboundIsRefusedUnlessTheRunnerEnablesIt) {
  RunnerProcess r;
  ASSERT_TRUE(r.start()) << r.log();
  auto res = r.client({"run", "--network", "outbound", "--", "/bin/true"});
  EXPECT_NE(res.exit_code, 0);
  EXPECT_NE((res.out + res.err).find("network_unsupported"), std::string::npos) << res.out << res.err;
  auto ok = r.client({"run", "--network", "offline", "--", "/bin/true"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// The job's veth goes with the job; the egress namespace and the uplink's veth and table go
// with the runner: on a clean stop, and on the next start after a kill.
TEST_F(RunnerNetwork, NetworkPiecesAreRemovedWithTheJobAndTheRunner) {
  auto r = outbound_runner();
  ASSERT_TRUE(r->start()) << r->log();
  const std::string eg = egress_netns(*r), tag = netpolicy::egress_tag(r->state_dir());
  // The client goes after 2 s (killed by run_program); the job runs on.
  r->client({"run", "--network", "outbound", "--", "/bin/sleep", "30"}, std::chrono::seconds(2));
  std::string links;
  for (int i = 0; i < 100 && (links = job_links(*r)).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(links.empty()) << "no job veth while the job runs";
  // Killed with the job running: its namespace, veth, uplink veth and table are left behind...
  r->kill9();
  EXPECT_TRUE(exists("/run/netns/" + eg));
  EXPECT_TRUE(sh(fmt::format("ip -n {} link show meg-{} >/dev/null 2>&1", up_, tag)));
  // ...and the next start removes them (here with outbound disabled: nothing is rebuilt).
  std::string conf = read_file(r->config_path());
  conf.replace(conf.find("outbound_network = true"), 23, "outbound_network = false");
  write_file(r->config_path(), conf);
  ASSERT_TRUE(r->start()) << r->log();
  EXPECT_FALSE(exists("/run/netns/" + eg));
  EXPECT_FALSE(sh(fmt::format("ip -n {} link show meg-{} >/dev/null 2>&1", up_, tag)));
  EXPECT_FALSE(sh(fmt::format("ip netns exec {} nft list table ip motor_eg_{} >/dev/null 2>&1", up_, tag)));
  EXPECT_EQ(r->stop(), 0);

  // Enabled again: a job's veth is gone once the job ended; a clean stop removes the rest.
  conf.replace(conf.find("outbound_network = false"), 24, "outbound_network = true");
  write_file(r->config_path(), conf);
  ASSERT_TRUE(r->start()) << r->log();
  EXPECT_EQ(r->client({"run", "--network", "outbound", "--", "/bin/true"}).exit_code, 0);
  for (int i = 0; i < 100 && !(links = job_links(*r)).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(links, "");
  EXPECT_TRUE(sh(fmt::format("ip netns exec {} nft list table ip motor_eg_{} >/dev/null 2>&1", up_, tag)));
  EXPECT_EQ(r->stop(), 0);
  EXPECT_FALSE(exists("/run/netns/" + eg));
  EXPECT_FALSE(sh(fmt::format("ip -n {} link show meg-{} >/dev/null 2>&1", up_, tag)));
  EXPECT_FALSE(sh(fmt::format("ip netns exec {} nft list table ip motor_eg_{} >/dev/null 2>&1", up_, tag)));
}

}  // namespace
}  // namespace motor::test

namespace motor::test {
namespace {

// A VM job's dependency preparation (vm_prepare_command, docs/windows-jobs.md) gets the outbound
// jobs' network on an outbound runner: its own eth0 behind the same policy (a public address
// reachable, a private one not). It fails on purpose afterwards, so no VM boots.
TEST_F(RunnerNetwork, VmPreparationGetsTheOutboundJobsFilteredNetwork) {
  const std::string guest = test_guest_dir();
  MOTOR_REQUIRE(access((guest + "/base.qcow2").c_str(), R_OK) == 0 && access("/run/libvirt/libvirt-sock", F_OK) == 0,
                "the test guest or libvirtd is missing (scripts/setup, scripts/build-test-guest)");
  auto r = outbound_runner();
  write_file(r->config_path(),
             read_file(r->config_path()) +
                 fmt::format("vm_image = {0}/base.qcow2\nvm_kernel = {0}/vmlinuz\nvm_initrd = {0}/initrd.img\n"
                             "vm_dir = {1}/vm\nvm_data_dir = {1}/vm-data\nvm_accelerator = tcg\nallow_emulation = true\n"
                             "vm_prepare_command = \"python3 /workspace/probe.py links tcp:198.51.100.7:{2} "
                             "tcp:10.9.9.9:{2}; exit 9\"\n",
                             guest, r->dir(), kPort));
  ASSERT_TRUE(r->start()) << r->log();
  // The workspace's opaque name needs the runner's name key, made at its start.
  const std::string ws = r->workspace("default");
  ASSERT_FALSE(ws.empty());
  std::filesystem::create_directories(ws);
  write_file(ws + "/probe.py", kProbe);
  RawClient c(r->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true","platform":"windows","memory":"256M"}})"));
  std::string err, terminal;
  while (auto f = c.read_frame(std::chrono::milliseconds(60000))) {
    if (json_field(*f, "/type") == "output") err += protocol::base64_decode(json_field(*f, "/bytes")).value_or("?");
    if (json_field(*f, "/type") == "terminal") {
      terminal = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(terminal, "/outcome/reason"), "vm_start_failed") << terminal;
  auto p = parse_lines(err);
  EXPECT_EQ(p["links"], "eth0,lo") << err;
  EXPECT_EQ(p[fmt::format("tcp:198.51.100.7:{}", kPort)], "OK") << err;
  EXPECT_EQ(p[fmt::format("tcp:10.9.9.9:{}", kPort)].rfind("FAIL", 0), 0u) << err;
}

}  // namespace
}  // namespace motor::test
