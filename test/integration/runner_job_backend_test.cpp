// job_backend (issue 22) where systemd does not run the host, as on these machines: `systemd` is a
// config error at start (exit 78, the reason named), `auto` says why it chose direct and runs jobs.
// The systemd backend itself is tested under a booted systemd (test/systemd/unit-backend.sh).
#include <gtest/gtest.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

TEST(RunnerJobBackend, SystemdWithoutItsBusIsAConfigErrorAndAutoRunsJobsDirectly) {
  MOTOR_REQUIRE(getuid() == 0, "needs root");
  if (sd_booted() > 0) GTEST_SKIP() << "systemd runs this host: job_backend = systemd would start (test/systemd covers it)";
  {
    RunnerProcess runner("job_backend = systemd\n");
    EXPECT_FALSE(runner.start());
    EXPECT_NE(runner.log().find("job_backend = systemd, but systemd's bus does not answer"), std::string::npos)
        << runner.log();
    const auto r = run_program({MOTOR_RUNNER_BIN, "serve", "--config", runner.config_path(), "--state-dir",
                                runner.state_dir(), "--socket", runner.socket()},
                               {}, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 78) << r.err;
  }
  RunnerProcess runner("job_backend = auto\n");
  ASSERT_TRUE(runner.start()) << runner.log();
  const auto r = runner.client({"run", "--no-sync", "--", "echo", "direct"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "direct\n");
  EXPECT_NE(runner.log().find("job_backend = auto: systemd is not PID 1 here"), std::string::npos) << runner.log();
}

}  // namespace
}  // namespace motor::test
