// The gate's "service accounts own nothing" check (issue 19): what the runner hands to an
// account by design (Git mirrors and transfers to motor-cache) is not a finding, so the gate on
// a production host that has served jobs passes; the same account owning anything else is.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "gate/host_checks.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

const gate::HostCheck* find_check(const std::vector<gate::HostCheck>& checks, const std::string& name) {
  auto it = std::find_if(checks.begin(), checks.end(), [&](const gate::HostCheck& c) { return c.name == name; });
  return it == checks.end() ? nullptr : &*it;
}

TEST(GateOwnership, MirrorsOfTheCacheAccountAreByDesignAnythingElseIsAFinding) {
  MOTOR_REQUIRE(geteuid() == 0, "chowns files to the service accounts");
  const passwd* cache = getpwnam("motor-cache");
  MOTOR_REQUIRE(cache != nullptr, "the motor-cache account (scripts/setup creates it)");
  const uid_t uid = cache->pw_uid;
  const gid_t gid = cache->pw_gid;
  const std::string state = make_temp_dir();
  ASSERT_EQ(mkdir((state + "/mirrors").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((state + "/transfers").c_str(), 0700), 0);
  write_file(state + "/mirrors/repo.git", "x");
  for (const char* p : {"/mirrors", "/transfers", "/mirrors/repo.git"}) ASSERT_EQ(chown((state + p).c_str(), uid, gid), 0);

  config::Config config;
  config.state_dir = state;
  gate::HostFacts facts;
  auto checks = gate::run_host_checks(config, facts);
  const gate::HostCheck* own = find_check(checks, "service accounts own nothing");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->status, gate::CheckStatus::kOk) << own->detail;

  // The same account owning a file the runner never gave it is still a finding.
  write_file(state + "/planted", "x");
  ASSERT_EQ(chown((state + "/planted").c_str(), uid, gid), 0);
  checks = gate::run_host_checks(config, facts);
  own = find_check(checks, "service accounts own nothing");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->status, gate::CheckStatus::kFail);
  EXPECT_NE(own->detail.find(state + "/planted"), std::string::npos) << own->detail;
  EXPECT_EQ(own->detail.find("repo.git"), std::string::npos) << own->detail;
  remove_tree(state);
}

}  // namespace
}  // namespace motor::test
