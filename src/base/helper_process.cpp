#include "base/helper_process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/cpu_policy.hpp"
#include "motor/sys_error.hpp"

namespace motor {

int become_helper_process(int channel, const char* name, pid_t runner) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != runner) _exit(0);  // the runner died before the line above
  prctl(PR_SET_NAME, name);
  // The runner's loop wakes its helpers many times per job; as SCHED_BATCH they never take the
  // CPU from it mid-iteration (base/cpu_policy.hpp). Best effort: only the loop's latency is at stake.
  (void)make_this_thread_batch();
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (dup2(channel, 3) < 0) _exit(1);
  syscall(SYS_close_range, 4u, ~0u, 0u);
  return 3;
}

Expected<HelperProcess> fork_helper_process(const char* name, const std::function<void(int)>& main) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
  const pid_t runner = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return sys_error("fork");
  }
  if (pid == 0) {
    close(sv[0]);
    main(become_helper_process(sv[1], name, runner));
    _exit(0);
  }
  close(sv[1]);
  HelperProcess out;
  out.pid = pid;
  out.channel = UniqueFd(sv[0]);
  return out;
}

}  // namespace motor
