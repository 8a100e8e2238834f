// The host's floor under a burst, measured beside the runner's loop stall: a process of the
// bench's own that does a fixed piece of CPU work (its thread's CPU time, so a piece is never
// shortened by the host) every few milliseconds and keeps the longest wall time one piece took.
// On a host whose CPUs are busy with the burst's sandboxes, no loop iteration of that much work,
// the runner's or any other program's, can stall the loop for less than the probe's piece took;
// the runner's figure is read against it (bench/README.md, "Session 21").
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "motor/unique_fd.hpp"

namespace motor::bench {

class StallProbe {
 public:
  // Forks the probe; call before the bench starts threads or runners. `work_us` of CPU every
  // `period_ms`.
  StallProbe(uint64_t work_us, int period_ms) : work_us_(work_us) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(sv[0]);
      run(sv[1], work_us * 1000, period_ms);
    }
    close(sv[1]);
    sock_ = UniqueFd(sv[0]);
    if (pid_ < 0) sock_.reset();
  }
  ~StallProbe() {
    sock_.reset();  // the probe exits at EOF
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  StallProbe(const StallProbe&) = delete;
  StallProbe& operator=(const StallProbe&) = delete;

  bool running() const { return static_cast<bool>(sock_); }
  uint64_t work_us() const { return work_us_; }
  // Forgets the worst piece so far (before a burst).
  void reset() { ask('r'); }
  // The longest wall time one piece took since the last reset, in microseconds; -1 if unknown.
  double worst_us() { return ask('q'); }

 private:
  static int64_t now_ns(clockid_t clock) {
    timespec t{};
    clock_gettime(clock, &t);
    return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
  }

  [[noreturn]] static void run(int sock, uint64_t work_ns, int period_ms) {
    int64_t worst = 0;
    for (;;) {
      const int64_t cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID), wall0 = now_ns(CLOCK_MONOTONIC);
      while (now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < static_cast<int64_t>(work_ns)) {
      }
      const int64_t wall = now_ns(CLOCK_MONOTONIC) - wall0;
      if (wall > worst) worst = wall;
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, period_ms) <= 0) continue;
      char c = 0;
      if (read(sock, &c, 1) != 1) _exit(0);  // the bench is gone
      if (c == 'q') (void)!write(sock, &worst, sizeof worst);
      worst = 0;  // 'r', and after a query the next one starts afresh too
    }
  }

  double ask(char c) {
    if (!sock_ || write(sock_.get(), &c, 1) != 1) return -1;
    if (c != 'q') return 0;
    int64_t worst = 0;
    pollfd p{sock_.get(), POLLIN, 0};
    if (poll(&p, 1, 5000) != 1 || read(sock_.get(), &worst, sizeof worst) != sizeof worst) return -1;
    return static_cast<double>(worst) / 1000.0;
  }

  uint64_t work_us_;
  pid_t pid_ = -1;
  UniqueFd sock_;
};

}  // namespace motor::bench
