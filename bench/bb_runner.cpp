// motor-bb-runner against bb_runner's own way: Run of a trivial action (/bin/true) over gRPC
// through motor-bb-runner (a Motor job, full sandbox) vs fork/exec of the same command with the
// same directories and files (bb_runner: open stdout/stderr O_EXCL in the build directory,
// chdir to the input root, exec with the action's environment, wait). Interleaved, medians.
// A third column, the same job sent as exec.run straight to the runner's socket, splits Motor's
// figure into the job itself and what gRPC and motor-bb-runner add.
//
// The runner builds the next sandbox as each job ends (src/runner/sandbox_pool.hpp). The goal
// rows wait for that before each timed item, so no column, the fork/exec baseline included,
// runs beside a build; a second set of rows runs them back to back, where a build lands on
// whatever comes next.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "bbrunner/bb_fixture.hpp"
#include "stats.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// bb_runner's Run, in process: what the same action costs without any isolation.
bool fork_exec(const std::string& build, const motor::test::ActionDir& a) {
  const int out = open((build + "/" + a.name + "/stdout").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
  const int err = open((build + "/" + a.name + "/stderr").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
  if (out < 0 || err < 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out, 1);
    dup2(err, 2);
    if (chdir(a.root().c_str()) != 0) _exit(127);
    char path[] = "PATH=/usr/bin:/bin";
    char* env[] = {path, nullptr};
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    execve("/bin/true", argv, env);
    _exit(127);
  }
  close(out);
  close(err);
  int status = 0;
  rusage usage{};
  return pid > 0 && wait4(pid, &status, 0, &usage) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Until the runner has a sandbox built ahead waiting again (at most 2 s).
void settle(const motor::test::RunnerProcess& runner) {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline &&
         motor::test::json_field(motor::test::runner_status(runner), "/result/sandboxes_ready") == "0") {
    usleep(2000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 40;
  motor::test::BbFarm farm("", {"--memory", "256M"});
  if (!farm.start()) {
    std::fprintf(stderr, "could not start the runner and motor-bb-runner:\n%s\n%s\n", farm.runner().log().c_str(), farm.bb_log().c_str());
    return 1;
  }
  std::vector<double> motor_ms, fork_ms, direct_ms, b2b_motor_ms, b2b_fork_ms;
  for (int i = -3; i < 2 * runs; ++i) {  // three warm-up rounds, not counted; then settled, then back to back
    const bool settled = i < runs;
    if (settled) settle(farm.runner());
    auto a = farm.make_action(fmt::format("m{}", i + 3));
    const auto request = farm.request(a, {"/bin/true"});
    auto t0 = Clock::now();
    auto r = farm.run(request);
    const double m = ms_since(t0);
    if (!r.status.ok() || r.reply.exit_code() != 0) {
      std::fprintf(stderr, "Run failed: %s\n", r.status.error_message().c_str());
      return 1;
    }
    if (!settled) {
      b2b_motor_ms.push_back(m);
      auto b = farm.make_action(fmt::format("g{}", i + 3));
      t0 = Clock::now();
      if (!fork_exec(farm.build_dir(), b)) return std::fprintf(stderr, "fork/exec failed\n"), 1;
      b2b_fork_ms.push_back(ms_since(t0));
      continue;
    }
    settle(farm.runner());
    auto d = farm.make_action(fmt::format("d{}", i + 3));
    t0 = Clock::now();
    motor::test::RawClient c(farm.runner().socket());
    c.send_frame(fmt::format(R"({{"id":1,"method":"exec.run","params":{{"argv":["/bin/true"],"env":{{"PATH":"/usr/bin:/bin"}},)"
                             R"("workspace_key":"bench-{}","memory":268435456,"host_workspace":{{"input_root":"{}/root","tmp":"{}/tmp"}}}}}})",
                             i + 3, d.name, d.name));
    const auto frames = motor::test::read_until_terminal(c);
    const double dm = ms_since(t0);
    if (frames.empty() || frames.back().find("\"code\":0") == std::string::npos) {
      std::fprintf(stderr, "direct exec.run failed: %s\n", frames.empty() ? "no answer" : frames.back().c_str());
      return 1;
    }
    settle(farm.runner());
    auto b = farm.make_action(fmt::format("f{}", i + 3));
    t0 = Clock::now();
    if (!fork_exec(farm.build_dir(), b)) return std::fprintf(stderr, "fork/exec failed\n"), 1;
    const double f = ms_since(t0);
    if (i >= 0) {
      motor_ms.push_back(m);
      fork_ms.push_back(f);
      direct_ms.push_back(dm);
    }
  }
  double load[1] = {0};
  getloadavg(load, 1);
  const double mm = motor::bench::median(motor_ms), fm = motor::bench::median(fork_ms);
  std::printf("runs %d, load average %.1f\n", runs, load[0]);
  std::printf("motor-bb-runner Run of /bin/true: median %.2f ms (p90 %.2f)\n", mm, motor::bench::percentile(motor_ms, 0.9));
  std::printf("bb_runner's way (fork/exec, same dirs): median %.2f ms (p90 %.2f)\n", fm, motor::bench::percentile(fork_ms, 0.9));
  const double dmed = motor::bench::median(direct_ms);
  std::printf("the same job as exec.run on the runner's socket: median %.2f ms (p90 %.2f)\n", dmed,
              motor::bench::percentile(direct_ms, 0.9));
  std::printf("ratio %.2fx against fork/exec (goal <= 1.5x); gRPC and motor-bb-runner add %.2f ms (%.2fx the direct job)\n",
              mm / fm, mm - dmed, mm / dmed);
  const double bm = motor::bench::median(b2b_motor_ms), bf = motor::bench::median(b2b_fork_ms);
  std::printf("back to back (no wait for the next sandbox): Run %.2f ms, fork/exec %.2f ms, ratio %.2fx\n", bm, bf, bm / bf);
  return 0;
}
