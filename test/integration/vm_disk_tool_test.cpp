// The confined disk tools of VM jobs (src/vm/disk_tool): qemu-img makes the overlay; whatever
// runs there has no capabilities, a network namespace of its own, and no sockets at all.
#include "vm/disk_tool.hpp"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

class VmDiskTool : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(access("/usr/bin/qemu-img", X_OK) == 0, "qemu-img is missing (scripts/setup installs it)");
    MOTOR_REQUIRE(access((test_guest_dir() + "/base.qcow2").c_str(), R_OK) == 0, "no test guest (scripts/build-test-guest)");
    uv_loop_init(&loop_);
    parent_ = "motor-test-disk-" + unique_marker();
    auto driver = sandbox::detect_cgroups(parent_);
    ASSERT_TRUE(driver.ok()) << driver.error().message;
    driver_ = std::move(*driver);
    auto qemu = sandbox::lookup_unprivileged_account("motor-qemu");
    ASSERT_TRUE(qemu.ok());
    account_ = *qemu;
    dir_ = make_temp_dir();
    chmod(dir_.c_str(), 0711);
    work_ = dir_ + "/work";
    ASSERT_EQ(mkdir(work_.c_str(), 0700), 0);
    ASSERT_EQ(chown(work_.c_str(), account_.uid, account_.gid), 0);
  }
  void TearDown() override {
    driver_.reset();
    for (const char* h : {"unified", "memory", "pids", "cpuset", "freezer", "cpu"}) {
      rmdir(("/sys/fs/cgroup/" + std::string(h) + "/" + parent_).c_str());
    }
    if (!dir_.empty()) remove_tree(dir_);
    uv_loop_close(&loop_);
  }
  Status run(const std::vector<std::string>& command, const std::string& read_only_dir) {
    vm::DiskToolSpec spec;
    spec.command = command;
    spec.writable_dir = work_;
    if (!read_only_dir.empty()) spec.read_only = {{read_only_dir, read_only_dir}};
    spec.account = account_;
    spec.init_path = MOTOR_INIT_BIN;
    spec.cgroup_name = "vmdisk-test";
    std::optional<Status> result;
    auto tool = vm::DiskTool::start(&loop_, *driver_, starter_, spec, [&](Status s) { result = std::move(s); });
    if (!tool) return tool.error();
    while (!result) uv_run(&loop_, UV_RUN_ONCE);
    tool->reset();
    uv_run(&loop_, UV_RUN_NOWAIT);
    return *result;
  }

  uv_loop_t loop_{};
  std::string parent_, dir_, work_;
  std::unique_ptr<sandbox::CgroupDriver> driver_;
  sandbox::InProcessStarter starter_;
  sandbox::Account account_;
};

TEST_F(VmDiskTool, QemuImgMakesAnOverlayAsTheQemuAccount) {
  const std::string base = test_guest_dir() + "/base.qcow2";
  struct stat before {};
  ASSERT_EQ(stat(base.c_str(), &before), 0);
  auto s = run(vm::qemu_img_overlay_command(base, work_ + "/system.qcow2"), test_guest_dir());
  ASSERT_TRUE(s.ok()) << s.error().message;
  struct stat st {};
  ASSERT_EQ(stat((work_ + "/system.qcow2").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, account_.uid);
  struct stat after {};
  ASSERT_EQ(stat(base.c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec) << "the sealed image was written";
}

TEST_F(VmDiskTool, NoCapabilitiesOwnNetworkNamespaceAndNoSockets) {
  const std::string ours = std::filesystem::read_symlink("/proc/self/ns/net").string();
  // Prints its capabilities and network namespace, then tries a Unix and an inet socket.
  auto s = run({"/usr/bin/python3", "-c",
                "import os, socket\n"
                "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].strip())\n"
                "print('netns', os.readlink('/proc/self/ns/net'))\n"
                "for name, fam in (('unix', socket.AF_UNIX), ('inet', socket.AF_INET)):\n"
                "    try:\n"
                "        socket.socket(fam); print('socket', name, 'made')\n"
                "    except OSError as e:\n"
                "        print('socket', name, 'refused', e.errno)\n"
                "raise SystemExit(3)\n"},
               "");
  ASSERT_FALSE(s.ok());
  const std::string& out = s.error().message;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("netns net:["), std::string::npos) << out;
  EXPECT_EQ(out.find("netns " + ours), std::string::npos) << "the tool shares the runner's network namespace";
  EXPECT_NE(out.find("socket unix refused 1"), std::string::npos) << out;  // EPERM
  EXPECT_NE(out.find("socket inet refused 1"), std::string::npos) << out;
  EXPECT_EQ(out.find("made"), std::string::npos) << out;
}

}  // namespace
}  // namespace motor::test
