// Outbound jobs (issue 9), as ratios against a baseline measured in the same run:
//
//  1. Start latency: exec.run to the first output byte of `/bin/echo x`, network "outbound"
//     against "offline", interleaved, through one real runner with outbound_network enabled.
//  2. DNS round trip: the same python client timing A queries, inside an outbound job against
//     the filtering resolver (its gateway), against the fake upstream (dnsmasq) queried directly
//     from the upstream namespace.
//
// The uplink is a namespace this benchmark makes, with no link to the outside; dnsmasq runs in it
// as this process's child and is stopped by its pid, the namespace is deleted at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "first_output.hpp"
#include "stats.hpp"
#include "support/runner_harness.hpp"

namespace {

using motor::bench::median;
using motor::test::run_program;

constexpr const char* kDnsTimer = R"PY(
import socket, struct, sys, time
ns, n = sys.argv[1], int(sys.argv[2])
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x06public\x04test\x00" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.connect((ns, 53))
out = []
for i in range(n + 5):
    t = time.perf_counter(); s.send(q); s.recv(4096); d = (time.perf_counter() - t) * 1e6
    if i >= 5: out.append(d)
print(" ".join("%.1f" % x for x in out))
)PY";

std::vector<double> numbers(const std::string& text) {
  std::vector<double> v;
  const char* p = text.c_str();
  char* end = nullptr;
  for (double x = std::strtod(p, &end); end != p; x = std::strtod(p, &end)) {
    v.push_back(x);
    p = end;
  }
  return v;
}

bool sh(const std::string& cmd) { return run_program({"/bin/sh", "-c", cmd}).exit_code == 0; }

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 50;
  if (geteuid() != 0) {
    fmt::print(stderr, "bench: run as root\n");
    return 1;
  }
  const std::string up = "mbench-up-" + motor::test::unique_marker();
  const std::string dir = motor::test::make_temp_dir();
  bool ok = sh("ip netns add " + up) && sh("ip -n " + up + " link set lo up") &&
            sh("ip -n " + up + " addr add 10.53.53.53/32 dev lo") &&
            sh("ip -n " + up + " addr add 198.51.100.1/24 dev lo");
  const pid_t dnsmasq = fork();
  if (dnsmasq == 0) {
    execl("/usr/sbin/ip", "ip", "netns", "exec", up.c_str(), "/usr/sbin/dnsmasq", "--keep-in-foreground", "--no-resolv",
          "--no-hosts", "--listen-address=10.53.53.53", "--bind-interfaces", "--host-record=public.test,93.184.216.34",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int rc = 1;
  {
    motor::test::RunnerProcess runner(fmt::format(
        "max_running_jobs = 64\noutbound_network = true\noutbound_uplink_netns = {}\noutbound_resolvers = 10.53.53.53\n", up));
    if (!ok || !runner.start()) {
      fmt::print(stderr, "bench: set-up failed:\n{}\n", runner.log());
    } else {
      for (int i = 0; i < 5; ++i) {
        motor::bench::first_output_us(runner.socket(), i);
        motor::bench::first_output_us_with_network(runner.socket(), i, "outbound");
      }
      std::vector<double> offline, outbound;
      for (int i = 0; i < runs; ++i) {
        offline.push_back(motor::bench::first_output_us(runner.socket(), 100 + 2 * i));
        outbound.push_back(motor::bench::first_output_us_with_network(runner.socket(), 101 + 2 * i, "outbound"));
      }
      const double off_ms = median(offline) / 1000, out_ms = median(outbound) / 1000;
      fmt::print("start latency (exec.run -> first output of /bin/echo x), {} runs each, interleaved:\n", runs);
      fmt::print("  offline  median {:.2f} ms\n  outbound median {:.2f} ms   ratio {:.2f}\n", off_ms, out_ms, out_ms / off_ms);

      const int queries = 200;
      // The job's nameserver is its gateway: read it from its resolv.conf inside the job.
      auto via = runner.client({"run", "--network", "outbound", "--", "/bin/sh", "-c",
                           std::string("exec /usr/bin/python3 -c '") + kDnsTimer +
                               "' \"$(sed -n 's/^nameserver //p' /etc/resolv.conf)\" " + std::to_string(queries)});
      auto direct = run_program({"/usr/sbin/ip", "netns", "exec", up, "/usr/bin/python3", "-c", kDnsTimer, "10.53.53.53",
                                 std::to_string(queries)});
      const auto v = numbers(via.out), d = numbers(direct.out);
      if (v.size() != static_cast<size_t>(queries) || d.size() != static_cast<size_t>(queries)) {
        fmt::print(stderr, "bench: DNS timing failed:\n{}{}\n{}{}\n", via.out, via.err, direct.out, direct.err);
      } else {
        fmt::print("DNS A query round trip, {} queries each (same python client):\n", queries);
        fmt::print("  direct to the upstream (dnsmasq)        median {:.1f} us\n", median(d));
        fmt::print("  through the filtering resolver (job)    median {:.1f} us   ratio {:.2f}\n", median(v),
                   median(v) / median(d));
        rc = 0;
      }
      const std::string log = runner.log();
      size_t stalls = 0;
      for (size_t at = 0, nl = 0; at < log.size(); at = nl + 1) {
        nl = log.find('\n', at);
        if (nl == std::string::npos) nl = log.size();
        const std::string line = log.substr(at, nl - at);
        stalls += line.find("resolver") != std::string::npos && line.find("stalled the loop") != std::string::npos;
      }
      fmt::print("resolver calls the runner logged as stalling its loop (>= 2 ms): {}\n", stalls);
    }
  }
  kill(dnsmasq, SIGTERM);
  waitpid(dnsmasq, nullptr, 0);
  sh("ip netns del " + up);
  motor::test::remove_tree(dir);
  return rc;
}
