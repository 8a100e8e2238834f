// The accelerator decision (vm_accelerator, allow_emulation, the KVM probe's answer).
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "vm/accelerator.hpp"

namespace motor::vm {
namespace {

const std::optional<std::string> kUsable;
const std::optional<std::string> kUnusable = std::string("as motor-qemu, /dev/kvm: cannot open it read-write");

TEST(Accelerator, AutoTakesKvmOnlyWhenTheProbeSaysItWorks) {
  for (bool allow : {false, true}) {
    auto c = choose_accelerator(Accelerator::kAuto, allow, kUsable);
    EXPECT_FALSE(c.refused);
    EXPECT_FALSE(c.emulated) << "usable KVM must be preferred even when emulation is allowed";
  }
  auto tcg = choose_accelerator(Accelerator::kAuto, true, kUnusable);
  EXPECT_FALSE(tcg.refused);
  EXPECT_TRUE(tcg.emulated);
  auto refused = choose_accelerator(Accelerator::kAuto, false, kUnusable);
  ASSERT_TRUE(refused.refused);
  EXPECT_NE(refused.refused->find("allow_emulation"), std::string::npos) << *refused.refused;
  EXPECT_NE(refused.refused->find("cannot open"), std::string::npos) << "the probe's reason must be named";
}

TEST(Accelerator, KvmNeverFallsBackToEmulation) {
  EXPECT_FALSE(choose_accelerator(Accelerator::kKvm, true, kUsable).refused);
  EXPECT_FALSE(choose_accelerator(Accelerator::kKvm, true, kUsable).emulated);
  auto c = choose_accelerator(Accelerator::kKvm, true, kUnusable);
  ASSERT_TRUE(c.refused);
  EXPECT_NE(c.refused->find("vm_accelerator = kvm"), std::string::npos) << *c.refused;
  EXPECT_NE(c.refused->find("cannot open"), std::string::npos) << *c.refused;
}

TEST(Accelerator, TcgIsAlwaysEmulationAndNeedsItAllowed) {
  for (const auto& kvm : {kUsable, kUnusable}) {
    auto c = choose_accelerator(Accelerator::kTcg, true, kvm);
    EXPECT_FALSE(c.refused);
    EXPECT_TRUE(c.emulated);
    EXPECT_TRUE(choose_accelerator(Accelerator::kTcg, false, kvm).refused);
  }
}

TEST(Accelerator, ConfigKey) {
  auto c = config::parse_config("vm_accelerator = kvm\n");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->vm_accelerator, Accelerator::kKvm);
  EXPECT_EQ(config::parse_config("")->vm_accelerator, Accelerator::kAuto);
  auto tcg = config::parse_config("allow_emulation = true\nvm_accelerator = tcg\n");
  ASSERT_TRUE(tcg) << tcg.error().message;
  EXPECT_EQ(tcg->vm_accelerator, Accelerator::kTcg);
  auto bad = config::parse_config("vm_accelerator = hvf\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("expected auto, kvm or tcg"), std::string::npos) << bad.error().message;
  auto contradictory = config::parse_config("vm_accelerator = tcg\n");
  ASSERT_FALSE(contradictory);
  EXPECT_NE(contradictory.error().message.find("allow_emulation"), std::string::npos) << contradictory.error().message;
}

}  // namespace
}  // namespace motor::vm
