// Issue 4's figures, measured against baselines in the same run (bench/README.md):
//  1. runner memory per idle attached session, at 10,000 sessions (goal: under 16 KiB);
//  2. output fan-out throughput to 1, 100 and 1,000 attachers, against writing the same bytes
//     to /dev/null.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

int64_t rss_bytes(pid_t pid) {
  const std::string status = motor::test::read_file(fmt::format("/proc/{}/status", pid));
  const auto at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::atoll(status.c_str() + at + 6) * 1024;
}

// Reads every attacher's stream to its terminal record, all at once; returns bytes received.
int64_t drain_all(std::vector<std::unique_ptr<RawClient>>& clients) {
  std::vector<pollfd> fds;
  std::vector<std::string> bufs(clients.size());
  for (auto& c : clients) fds.push_back({c->fd(), POLLIN, 0});
  size_t open = clients.size();
  int64_t total = 0;
  std::vector<char> chunk(1 << 16);
  while (open > 0) {
    if (poll(fds.data(), fds.size(), 30000) <= 0) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      const ssize_t n = read(fds[i].fd, chunk.data(), chunk.size());
      if (n <= 0) {
        fds[i].fd = -1;
        --open;
        continue;
      }
      total += n;
      bufs[i].append(chunk.data(), static_cast<size_t>(n));
      // Frames: drop complete ones, stop at the terminal record.
      for (;;) {
        std::string& b = bufs[i];
        if (b.size() < 4) break;
        const auto* h = reinterpret_cast<const unsigned char*>(b.data());
        const size_t len = (size_t{h[0]} << 24) | (size_t{h[1]} << 16) | (size_t{h[2]} << 8) | h[3];
        if (b.size() < 4 + len) break;
        const bool terminal = b.compare(4, len, "terminal") != 0 && b.find("\"type\":\"terminal\"", 4) < 4 + len;
        b.erase(0, 4 + len);
        if (terminal) {
          fds[i].fd = -1;
          --open;
          break;
        }
      }
    }
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const int sessions = argc > 1 ? std::atoi(argv[1]) : 10000;
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
  if (static_cast<int>(nofile.rlim_cur) < sessions + 100) {
    fmt::print(stderr, "bench: the open-file limit ({}) is below {} sessions\n", nofile.rlim_cur, sessions);
    return 1;
  }
  RunnerProcess runner(fmt::format("max_sessions = {}\n", sessions + 100));
  if (!runner.start()) {
    fmt::print(stderr, "bench: the runner did not start:\n{}\n", runner.log());
    return 1;
  }

  // 1. Idle sessions: each connects and is answered once, then stays open doing nothing.
  {
    RawClient warm(runner.socket());
    warm.send_frame(R"({"id":1,"method":"runner.hello"})");
    warm.read_frame();
  }
  const int64_t before = rss_bytes(runner.pid());
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < sessions; ++i) {
    idle.push_back(std::make_unique<RawClient>(runner.socket()));
    idle.back()->send_frame(R"({"id":1,"method":"runner.hello"})");
  }
  int answered = 0;
  for (auto& c : idle) answered += c->read_frame().has_value();
  const int64_t after = rss_bytes(runner.pid());
  const double per_session = static_cast<double>(after - before) / sessions;
  fmt::print("idle sessions: {} open ({} answered); runner RSS {:.1f} MiB -> {:.1f} MiB\n", sessions, answered,
             before / 1048576.0, after / 1048576.0);
  fmt::print("  runner memory per idle session: {:.1f} KiB (goal: under 16 KiB) -> {}\n", per_session / 1024,
             per_session < 16 * 1024 ? "met" : "NOT met");
  idle.clear();

  // 2. Fan-out: a finished job's 4 MiB of output replayed to N attachers at once.
  RawClient owner(runner.socket());
  owner.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"head -c 4194304 /dev/zero","timeout":120}})");
  std::string job;
  for (;;) {
    auto f = owner.read_frame(std::chrono::milliseconds(60000));
    if (!f) break;
    if (json_field(*f, "/type") == "accepted") job = json_field(*f, "/job_id");
    if (json_field(*f, "/type") == "terminal") break;
  }
  const int64_t job_bytes = 4194304;
  for (int n : {1, 100, 1000}) {
    std::vector<std::unique_ptr<RawClient>> attachers;
    for (int i = 0; i < n; ++i) attachers.push_back(std::make_unique<RawClient>(runner.socket()));
    const auto t0 = Clock::now();
    for (auto& a : attachers) a->send_frame(fmt::format(R"({{"id":2,"method":"exec.attach","params":{{"job_id":"{}"}}}})", job));
    const int64_t wire = drain_all(attachers);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    // Baseline: the same raw bytes (n x job output) written to /dev/null in 64 KiB chunks.
    const int devnull = open("/dev/null", O_WRONLY);
    std::vector<char> block(65536, 'x');
    const auto b0 = Clock::now();
    for (int64_t left = job_bytes * n; left > 0; left -= static_cast<int64_t>(block.size())) {
      if (write(devnull, block.data(), block.size()) < 0) break;
    }
    const double base = std::chrono::duration<double>(Clock::now() - b0).count();
    close(devnull);
    const double rate = static_cast<double>(job_bytes) * n / secs / 1048576.0;
    const double base_rate = static_cast<double>(job_bytes) * n / base / 1048576.0;
    fmt::print("fan-out to {:4} attachers: {:8.1f} MiB/s of job output delivered ({:.1f} MiB on the wire in {:.2f} s); "
               "/dev/null {:9.1f} MiB/s; ratio {:.4f}\n",
               n, rate, wire / 1048576.0, secs, base_rate, rate / base_rate);
  }
  runner.stop();
  return 0;
}
