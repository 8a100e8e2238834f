// Windows jobs (issue 8) through a real runner, libvirt and QEMU. These machines' KVM cannot
// boot a stock kernel, so the VM is the small Linux test guest (scripts/build-test-guest) under
// TCG, pinned (vm_accelerator = tcg with allow_emulation = true): whether motor-qemu could use
// /dev/kvm differs between machines of this kind, and a suite must pass on all of them. It speaks
// the guest-agent protocol a Windows guest speaks.
// Every test leaves no domain, QEMU process, overlay or cgroup behind, also when it fails.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "protocol/base64.hpp"
#include "kvm_node.hpp"
#include "support/runner_harness.hpp"
#include "vm/qemu_confinement.hpp"

namespace motor::test {
namespace {

bool guest_ready() {
  struct stat st {};
  return stat((test_guest_dir() + "/base.qcow2").c_str(), &st) == 0 && stat("/run/libvirt/libvirt-sock", &st) == 0;
}

// What every VM test but the accelerator's own pins: TCG, whatever this machine's KVM can do.
constexpr const char* kTcg = "vm_accelerator = tcg\nallow_emulation = true\n";

std::string vm_config(const std::string& dir, const std::string& extra = "") {
  const std::string kGuest = test_guest_dir();
  return "vm_image = " + kGuest + "/base.qcow2\n" + "vm_kernel = " + kGuest + "/vmlinuz\n" + "vm_initrd = " + kGuest +
         "/initrd.img\n" + "vm_kernel_cmdline = \"console=ttyS0 panic=-1\"\n" + "vm_dir = " + dir + "/vm\n" +
         "vm_data_dir = " + dir + "/vm-data\n" + "vm_data_disk_size = 64M\nvm_memory_overhead = 256M\n" + extra;
}

struct VmRun {
  std::string job_id, terminal;
  std::string out, err;
  bool started = false;
};

// Submits a windows job on `c` and reads its records to the end.
VmRun run_vm(RawClient& c, const std::string& command, const std::string& extra_params = "", int64_t id = 1) {
  VmRun r;
  EXPECT_TRUE(c.send_frame("{\"id\":" + std::to_string(id) + ",\"method\":\"exec.run\",\"params\":{\"command\":" +
                           json_quote(command) + ",\"platform\":\"windows\",\"memory\":\"256M\"" + extra_params + "}}"));
  while (auto f = c.read_frame(std::chrono::milliseconds(240000))) {
    const std::string type = json_field(*f, "/type");
    if (type == "accepted") r.job_id = json_field(*f, "/job_id");
    if (type == "started") r.started = true;
    if (type == "output") {
      auto bytes = protocol::base64_decode(json_field(*f, "/bytes"));
      (json_field(*f, "/stream") == "stdout" ? r.out : r.err) += bytes.value_or("?");
    }
    if (type == "terminal" || json_field(*f, "/error/code") != "<missing>") {
      r.terminal = *f;
      break;
    }
  }
  return r;
}

class VmJobs : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(guest_ready(), "the test guest or libvirtd is missing (scripts/setup, scripts/build-test-guest)");
  }
  void start_runner(const std::string& extra = kTcg) {
    runner_ = std::make_unique<RunnerProcess>("");
    // The config names the runner's own directory, known only once it exists.
    write_file(runner_->dir() + "/runner.conf", read_file(runner_->dir() + "/runner.conf") + vm_config(runner_->dir(), extra));
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  void TearDown() override {
    if (!runner_) return;
    const std::string vm_dir = runner_->dir() + "/vm";
    runner_->stop(std::chrono::seconds(60));
    // Whatever a failed test left: domains of this runner's jobs (named motor-<job id>), their QEMU.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(vm_dir, ec)) {
      const std::string name = "motor-" + e.path().filename().string();
      run_program({runner_helper(), "destroy", "qemu:///system", name});
      for (pid_t p : processes_with("guest=" + name)) kill(p, SIGKILL);
    }
    // QEMU's pids cgroups live beside the runner's cgroup parent, in the pids hierarchy only.
    const std::string pids_parent = "/sys/fs/cgroup/pids/" + runner_->cgroup_parent() + "-vm";
    for (const auto& e : std::filesystem::directory_iterator(pids_parent, ec)) {
      if (!e.is_directory()) continue;
      for (int i = 0; i < 300 && rmdir(e.path().c_str()) < 0 && errno == EBUSY; ++i) {
        std::istringstream procs(read_file(e.path().string() + "/cgroup.procs"));
        for (pid_t p; procs >> p;) kill(p, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    rmdir(pids_parent.c_str());
    runner_.reset();
  }
  static std::string runner_helper() {
    const std::string bin = MOTOR_RUNNER_TESTING_BIN;
    return bin.substr(0, bin.rfind('/')) + "/motor-vm-helper";
  }
  std::unique_ptr<RunnerProcess> runner_;
};

// Nothing of the job is left on the host: no QEMU, no overlay; the data disk stays.
void expect_torn_down(const RunnerProcess& runner, const std::string& job_id) {
  EXPECT_TRUE(processes_with("guest=motor-" + job_id).empty()) << "a QEMU process outlived the job";
  struct stat st {};
  EXPECT_NE(stat((runner.dir() + "/vm/" + job_id).c_str(), &st), 0) << "the job's overlay directory is still there";
  EXPECT_NE(stat(("/sys/fs/cgroup/pids/" + runner.cgroup_parent() + "-vm/" + job_id).c_str(), &st), 0);
}

TEST_F(VmJobs, OutputExitCodeOnlyLoAndWhatPersists) {
  start_runner();
  RawClient c(runner_->socket());
  // Job 1: output on both streams, an exit code, a write to the system disk (the overlay) and
  // one to the data disk.
  auto one = run_vm(c, "echo hello; echo oops >&2; ls /sys/class/net; echo sys > /tmp/system-mark; "
                        "echo kept > /data/work/data-mark; exit 3");
  ASSERT_TRUE(one.started) << one.terminal << runner_->log();
  EXPECT_EQ(json_field(one.terminal, "/outcome/type"), "exit") << one.terminal;
  EXPECT_EQ(json_field(one.terminal, "/outcome/code"), "3");
  EXPECT_EQ(json_field(one.terminal, "/platform"), "windows");
  EXPECT_EQ(one.out, "hello\nlo\n") << "the guest must see no network interface but lo";
  EXPECT_EQ(one.err, "oops\n");
  expect_torn_down(*runner_, one.job_id);
  struct stat st {};
  EXPECT_EQ(stat((runner_->dir() + "/vm-data/root/default.img").c_str(), &st), 0) << "the data disk must stay";

  // Job 2, same workspace: a fresh overlay (the system-disk file is gone), the same data disk.
  auto two = run_vm(c, "test -e /tmp/system-mark && echo system-disk-leaked; cat /data/work/data-mark; id -u", "", 2);
  EXPECT_EQ(json_field(two.terminal, "/outcome/code"), "0") << two.terminal;
  EXPECT_EQ(two.out, "kept\n1000\n") << "want the data disk's file, no system-disk file, a non-root user";
  expect_torn_down(*runner_, two.job_id);

  // A clean stop leaves no cgroup parent behind, the VMs' pids parent included (cgroup v1).
  const std::string pids_parent = "/sys/fs/cgroup/pids/" + runner_->cgroup_parent() + "-vm";
  const bool had_pids_parent = stat(pids_parent.c_str(), &st) == 0;
  EXPECT_EQ(runner_->stop(std::chrono::seconds(60)), 0);
  if (had_pids_parent) {
    EXPECT_NE(stat(pids_parent.c_str(), &st), 0) << pids_parent << " was left behind";
  }
}

TEST_F(VmJobs, QemuIsConfinedAndCancelLeavesNothing) {
  // A variable in the runner's environment that QEMU must not inherit.
  setenv("MOTOR_VM_TEST_LEAK", "runner-environment", 1);
  start_runner();
  unsetenv("MOTOR_VM_TEST_LEAK");
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"echo up; sleep 600","platform":"windows","memory":"256M"}})"));
  std::string job_id;
  bool up = false;
  while (auto f = c.read_frame(std::chrono::milliseconds(240000))) {
    if (json_field(*f, "/type") == "accepted") job_id = json_field(*f, "/job_id");
    if (json_field(*f, "/type") == "output") up = true;
    if (up || json_field(*f, "/type") == "terminal") break;
  }
  ASSERT_TRUE(up) << runner_->log();
  const auto qemu = processes_with("guest=motor-" + job_id);
  ASSERT_EQ(qemu.size(), 1u);
  const std::string proc = "/proc/" + std::to_string(qemu[0]);

  const std::string status = read_file(proc + "/status");
  const std::string uid = std::to_string(getpwnam("motor-qemu")->pw_uid);
  EXPECT_NE(status.find("\nUid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid + "\n"), std::string::npos) << status;
  EXPECT_EQ(vm::parse_net_dev_interfaces(read_file(proc + "/net/dev")), std::vector<std::string>{"lo"});
  const std::string environ = read_file(proc + "/environ");
  EXPECT_EQ(environ.find("MOTOR_VM_TEST_LEAK"), std::string::npos);
  size_t at = 0;
  while (at < environ.size()) {  // only what libvirt itself sets
    const size_t end = environ.find('\0', at);
    const std::string name = environ.substr(at, environ.find('=', at) - at);
    const auto& allowed = vm::libvirt_qemu_environment_names();
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), name), allowed.end()) << name;
    at = end == std::string::npos ? environ.size() : end + 1;
  }
  const std::string cgroups = read_file(proc + "/cgroup");
  const std::string mem = "/sys/fs/cgroup/memory" + vm::cgroup_path_of(cgroups, "memory");
  EXPECT_EQ(read_file(mem + "/memory.limit_in_bytes"), std::to_string((256 + 256) << 20) + "\n");
  const std::string pids = vm::cgroup_path_of(cgroups, "pids");
  EXPECT_EQ(pids, "/" + runner_->cgroup_parent() + "-vm/" + job_id);
  EXPECT_EQ(read_file("/sys/fs/cgroup/pids" + pids + "/pids.max"), "1024\n");

  ASSERT_TRUE(c.send_frame("{\"id\":2,\"method\":\"exec.cancel\",\"params\":{\"job_id\":\"" + job_id + "\"}}"));
  std::string terminal;
  while (auto f = c.read_frame(std::chrono::milliseconds(60000))) {
    if (json_field(*f, "/type") == "terminal") {
      terminal = *f;
      break;
    }
  }
  EXPECT_EQ(json_field(terminal, "/killed"), "cancel") << terminal;  // issue 17: its outcome is the kill's signal
  expect_torn_down(*runner_, job_id);
  struct stat st {};
  EXPECT_EQ(stat((runner_->dir() + "/vm-data/root/default.img").c_str(), &st), 0) << "the data disk must stay";
}

TEST_F(VmJobs, DeadlineDestroysTheVm) {
  start_runner();
  RawClient c(runner_->socket());
  auto r = run_vm(c, "sleep 600", ",\"timeout\":12");
  EXPECT_EQ(json_field(r.terminal, "/killed"), "deadline") << r.terminal;
  expect_torn_down(*runner_, r.job_id);
}

TEST_F(VmJobs, FloodHugeLineAndInvalidUtf8AreBoundedAndTheRunnerAnswers) {
  start_runner(std::string(kTcg) + "vm_output_max_size = 1M\n");
  RawClient c(runner_->socket());
  // Invalid UTF-8 first, then a 100 MiB line, then a flood of short lines.
  ASSERT_TRUE(c.send_frame(
      R"({"id":1,"method":"exec.run","params":{"command":"printf 'bad \\377\\376 end\\n'; head -c 104857600 /dev/zero | tr '\\0' a; yes flood","platform":"windows","memory":"256M","timeout":600}})"));
  std::string job_id, out;
  RawClient other(runner_->socket());
  int status_answers = 0;
  while (auto f = c.read_frame(std::chrono::milliseconds(240000))) {
    const std::string type = json_field(*f, "/type");
    if (type == "accepted") job_id = json_field(*f, "/job_id");
    if (type == "output") {
      out += protocol::base64_decode(json_field(*f, "/bytes")).value_or("");
      // Another client's runner.status is answered while the flood is read.
      if (status_answers < 3) {
        ASSERT_TRUE(other.send_frame(R"({"id":7,"method":"runner.status","params":{}})"));
        auto s = other.read_frame(std::chrono::milliseconds(10000));
        ASSERT_TRUE(s) << "runner.status got no answer while a VM flooded output";
        ++status_answers;
      }
    }
    if (out.find("output stopped after") != std::string::npos) break;
    if (type == "terminal") break;
  }
  EXPECT_EQ(status_answers, 3);
  EXPECT_NE(out.find("bad \xEF\xBF\xBD\xEF\xBF\xBD end\n"), std::string::npos) << "invalid UTF-8 must become U+FFFD";
  EXPECT_NE(out.find("output stopped after"), std::string::npos);
  EXPECT_LE(out.size(), size_t{1} << 21) << "output beyond vm_output_max_size was sent";
  // The 100 MiB line never sat in the runner's memory.
  EXPECT_LT(peak_rss_bytes(runner_->pid()), int64_t{96} << 20);
  ASSERT_TRUE(c.send_frame("{\"id\":2,\"method\":\"exec.cancel\",\"params\":{\"job_id\":\"" + job_id + "\"}}"));
  while (auto f = c.read_frame(std::chrono::milliseconds(60000))) {
    if (json_field(*f, "/type") == "terminal") break;
  }
  expect_torn_down(*runner_, job_id);
}

// The fresh-machine case (issue 14 item 13): /dev/kvm is crw------- root root, so libvirt (as
// root) reports KVM while QEMU as motor-qemu cannot open it. The runner runs in a mount namespace
// of its own where /dev/kvm is such a node, whatever this machine's /dev/kvm is.
class VmAccelerator : public VmJobs {
 protected:
  void start_with_root_only_kvm(const std::string& extra) {
    ASSERT_TRUE(node_.made());
    runner_ = std::make_unique<RunnerProcess>("");
    write_file(runner_->dir() + "/runner.conf", read_file(runner_->dir() + "/runner.conf") + vm_config(runner_->dir(), extra));
    runner_->use_binary("/usr/bin/unshare", node_.runner_with_node_as_dev_kvm(MOTOR_RUNNER_BIN));
    ASSERT_TRUE(runner_->start()) << runner_->log();
  }
  // A windows job on a runner with `extra` is refused before it starts; the detail names each of `names`.
  void expect_refused(const std::string& extra, std::initializer_list<const char*> names) {
    start_with_root_only_kvm(extra);
    RawClient c(runner_->socket());
    auto r = run_vm(c, "true");
    EXPECT_FALSE(r.started);
    EXPECT_EQ(json_field(r.terminal, "/outcome/reason"), "platform_unsupported") << r.terminal;
    for (const char* name : names) {
      EXPECT_NE(json_field(r.terminal, "/refusal_detail").find(name), std::string::npos) << name << ": " << r.terminal;
    }
  }
  KvmNode node_{0600, 0};
};

TEST_F(VmAccelerator, AutoRunsUnderTcgWhereQemuCannotOpenKvm) {
  start_with_root_only_kvm("allow_emulation = true\n");  // vm_accelerator = auto (the default)
  RawClient c(runner_->socket());
  auto r = run_vm(c, "echo ran");
  ASSERT_TRUE(r.started) << r.terminal << runner_->log();
  EXPECT_EQ(json_field(r.terminal, "/outcome/type"), "exit") << r.terminal;
  EXPECT_EQ(json_field(r.terminal, "/outcome/code"), "0") << r.terminal;
  EXPECT_EQ(r.out, "ran\n");
  const std::string log = runner_->log();
  EXPECT_NE(log.find("TCG emulation"), std::string::npos) << log;
  EXPECT_NE(log.find("as motor-qemu, /dev/kvm: cannot open it read-write (Permission denied)"), std::string::npos) << log;
  expect_torn_down(*runner_, r.job_id);
}

TEST_F(VmAccelerator, AutoRefusesWhereQemuCannotOpenKvmAndEmulationIsNotAllowed) {
  expect_refused("", {"allow_emulation", "as motor-qemu, /dev/kvm: cannot open"});
}

TEST_F(VmAccelerator, KvmIsRefusedWhereQemuCannotOpenItEvenWithEmulationAllowed) {
  expect_refused("vm_accelerator = kvm\nallow_emulation = true\n", {"vm_accelerator = kvm", "cannot open"});
}

TEST_F(VmJobs, ARestartedRunnerDestroysTheVmOfADeadOne) {
  start_runner();
  RawClient c(runner_->socket());
  ASSERT_TRUE(c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"echo up; sleep 600","platform":"windows","memory":"256M"}})"));
  std::string job_id;
  while (auto f = c.read_frame(std::chrono::milliseconds(240000))) {
    if (json_field(*f, "/type") == "accepted") job_id = json_field(*f, "/job_id");
    if (json_field(*f, "/type") == "output" || json_field(*f, "/type") == "terminal") break;
  }
  ASSERT_EQ(processes_with("guest=motor-" + job_id).size(), 1u) << runner_->log();
  runner_->kill9();
  ASSERT_EQ(processes_with("guest=motor-" + job_id).size(), 1u) << "the VM outlives its runner until recovery";
  ASSERT_TRUE(runner_->start()) << runner_->log();
  for (int i = 0; i < 600 && !processes_with("guest=motor-" + job_id).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The helper deletes the directory right after the destroy; the runner removes the pids cgroup
  // when the helper has answered (in the background while QEMU is still exiting).
  const std::string pids = "/sys/fs/cgroup/pids/" + runner_->cgroup_parent() + "-vm/" + job_id;
  for (int i = 0; i < 200; ++i) {
    struct stat st {};
    if (stat((runner_->dir() + "/vm/" + job_id).c_str(), &st) != 0 && stat(pids.c_str(), &st) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  expect_torn_down(*runner_, job_id);
}

}  // namespace
}  // namespace motor::test

// Dependency preparation (vm_prepare_command): a Linux sandbox job as motor-prep before the VM's
// disks are made; its result reaches the guest on the transfer disk at .motor-prep/.
namespace motor::test {
namespace {

// What a prepare command tells about itself: its uid, whether it could write the workspace,
// its network interfaces (outbound is off here: lo only). It also "vendors" the workspace's
// manifest, which proves it can read motor-job's 0700 workspace.
constexpr const char* kPrepProbe =
    "vm_prepare_command = \"echo prep says hi; id -u > $MOTOR_PREP_OUT/uid; "
    "if touch /workspace/planted-by-prep 2>/dev/null; then echo workspace-WRITABLE; else echo workspace-read-only; fi "
    "> $MOTOR_PREP_OUT/workspace; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > $MOTOR_PREP_OUT/net; "
    "mkdir $MOTOR_PREP_OUT/vendor && cp /workspace/Cargo.toml $MOTOR_PREP_OUT/vendor/\"\n";

bool mounted_anywhere(const std::string& needle) {
  return read_file("/proc/self/mountinfo").find(needle) != std::string::npos;
}

TEST_F(VmJobs, PreparedDependenciesReachTheGuestFromAConfinedPrepJob) {
  start_runner(std::string(kTcg) + kPrepProbe);
  const std::string ws = runner_->workspace("default");
  std::filesystem::create_directories(ws);
  write_file(ws + "/Cargo.toml", "[package]\nname = \"demo\"\n");
  const passwd* job = getpwnam("motor-job");
  ASSERT_NE(job, nullptr);
  ASSERT_EQ(chown(ws.c_str(), job->pw_uid, job->pw_gid), 0);
  ASSERT_EQ(chown((ws + "/Cargo.toml").c_str(), job->pw_uid, job->pw_gid), 0);
  ASSERT_EQ(chmod(ws.c_str(), 0700), 0);
  ASSERT_EQ(chmod((ws + "/Cargo.toml").c_str(), 0600), 0) << "only motor-job may read it, as a job may leave it";

  RawClient c(runner_->socket());
  auto r = run_vm(c, "cat .motor-prep/uid .motor-prep/workspace .motor-prep/net .motor-prep/vendor/Cargo.toml; cat Cargo.toml");
  ASSERT_FALSE(r.job_id.empty()) << r.terminal << runner_->log();
  ASSERT_TRUE(r.started) << r.terminal << r.err << runner_->log();
  EXPECT_EQ(json_field(r.terminal, "/outcome/code"), "0") << r.terminal;
  const std::string manifest = "[package]\nname = \"demo\"\n";
  EXPECT_EQ(r.out, std::to_string(getpwnam("motor-prep")->pw_uid) + "\nworkspace-read-only\nlo\n" + manifest + manifest)
      << "want: the prep ran as motor-prep, could not write the workspace, saw only lo; its result and the "
         "workspace both on the transfer disk";
  EXPECT_NE(r.err.find("motor: preparing dependencies"), std::string::npos) << r.err;
  EXPECT_EQ(r.terminal.find(".motor-prep"), std::string::npos) << "the guest listed the result as a change: " << r.terminal;
  EXPECT_NE(r.err.find("prep says hi\n"), std::string::npos) << "the prep's output reaches the client" << r.err;
  struct stat st {};
  EXPECT_NE(lstat((ws + "/planted-by-prep").c_str(), &st), 0) << "the prep wrote into the workspace";
  // Nothing of the prep is left: its cgroup, its tmpfs, the job's directory.
  expect_torn_down(*runner_, r.job_id);
  EXPECT_NE(stat(("/sys/fs/cgroup/memory/" + runner_->cgroup_parent() + "/vmprep-" + r.job_id).c_str(), &st), 0);
  EXPECT_NE(stat(("/sys/fs/cgroup/pids/" + runner_->cgroup_parent() + "/vmprep-" + r.job_id).c_str(), &st), 0);
  EXPECT_FALSE(mounted_anywhere(r.job_id + "/prep")) << "the prep's tmpfs is still mounted";
}

TEST_F(VmJobs, AFailingSlowOrCancelledPreparationBootsNothingAndLeavesNothing) {
  start_runner(std::string(kTcg) + "vm_prepare_command = \"echo fetching deps; exit 7\"\n");
  RawClient c(runner_->socket());
  auto r = run_vm(c, "echo the command must not run");
  ASSERT_FALSE(r.job_id.empty()) << r.terminal << runner_->log();
  EXPECT_FALSE(r.started);
  EXPECT_EQ(json_field(r.terminal, "/outcome/reason"), "vm_start_failed") << r.terminal;
  EXPECT_EQ(json_field(r.terminal, "/ran"), "none");
  const std::string detail = json_field(r.terminal, "/refusal_detail");
  EXPECT_NE(detail.find("dependency preparation (vm_prepare_command) failed: exit status 7"), std::string::npos) << detail;
  EXPECT_NE(r.err.find("fetching deps\n"), std::string::npos) << r.err;
  EXPECT_EQ(runner_->log().find("QEMU pid"), std::string::npos) << "a VM was started after a failed preparation";
  expect_torn_down(*runner_, r.job_id);
  struct stat st {};
  EXPECT_NE(stat(("/sys/fs/cgroup/memory/" + runner_->cgroup_parent() + "/vmprep-" + r.job_id).c_str(), &st), 0);
  EXPECT_FALSE(mounted_anywhere(r.job_id + "/prep"));

  // A cancel, and past vm_prepare_timeout_s, the prep (and what it started) is killed.
  runner_->stop();
  std::string conf = read_file(runner_->config_path());
  conf.replace(conf.find("vm_prepare_command"), std::string::npos,
               "vm_prepare_command = \"echo sleeping; sleep 3217 & sleep 3217\"\nvm_prepare_timeout_s = 8\n");
  write_file(runner_->config_path(), conf);
  ASSERT_TRUE(runner_->start()) << runner_->log();
  RawClient c2(runner_->socket());
  ASSERT_TRUE(c2.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true","platform":"windows","memory":"256M"}})"));
  std::string cancelled_id, cancelled;
  while (auto f = c2.read_frame(std::chrono::milliseconds(60000))) {
    if (json_field(*f, "/type") == "accepted") cancelled_id = json_field(*f, "/job_id");
    if (json_field(*f, "/type") == "output" && protocol::base64_decode(json_field(*f, "/bytes")).value_or("") == "sleeping\n") {
      ASSERT_TRUE(c2.send_frame("{\"id\":2,\"method\":\"exec.cancel\",\"params\":{\"job_id\":\"" + cancelled_id + "\"}}"));
    }
    if (json_field(*f, "/type") == "terminal") {
      cancelled = *f;
      break;
    }
  }
  ASSERT_FALSE(cancelled_id.empty()) << cancelled << runner_->log();
  EXPECT_EQ(json_field(cancelled, "/outcome/type"), "cancelled") << cancelled;
  EXPECT_TRUE(processes_with("sleep 3217").empty()) << "the prep's processes outlived a cancel";
  // The prep's cgroup goes through the runner's reaper, which removes it once cgroup.events says
  // it is empty: soon after the terminal record, not necessarily before it.
  const std::string prep_cgroup = "/sys/fs/cgroup/memory/" + runner_->cgroup_parent() + "/vmprep-" + cancelled_id;
  for (int i = 0; i < 100 && stat(prep_cgroup.c_str(), &st) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_NE(stat(prep_cgroup.c_str(), &st), 0) << "the prep's cgroup outlived the job by 5 s";
  EXPECT_FALSE(mounted_anywhere(cancelled_id + "/prep"));
  expect_torn_down(*runner_, cancelled_id);
  auto slow = run_vm(c2, "true", "", 3);
  ASSERT_FALSE(slow.job_id.empty()) << slow.terminal << runner_->log();
  EXPECT_EQ(json_field(slow.terminal, "/outcome/reason"), "vm_start_failed") << slow.terminal;
  EXPECT_NE(json_field(slow.terminal, "/refusal_detail").find("vm_prepare_timeout_s"), std::string::npos) << slow.terminal;
  EXPECT_TRUE(processes_with("sleep 3217").empty()) << "the prep's processes outlived its deadline";
  expect_torn_down(*runner_, slow.job_id);
}

}  // namespace
}  // namespace motor::test

namespace motor::test {
namespace {

// Issue 8 "Workspace into the guest": a workspace prepared from a real Git checkout reaches the
// guest through the transfer disk; the command runs in its cwd there; what it changed comes back
// from the guest's listing; the data disk keeps its new files for the next job of the key. The
// deadline counts from `started`, as a Linux job's: this VM boots (TCG) for longer than the job's
// timeout, and the job still runs to its end.
TEST_F(VmJobs, PreparedWorkspaceCwdChangesAndWhatTheDataDiskKeeps) {
  const std::string base = make_temp_dir();
  struct Cleanup {
    std::string dir;
    ~Cleanup() { remove_tree(dir); }
  } cleanup{base};
  auto sh = [](const std::string& cwd, const std::string& script) {
    auto r = run_program({"/bin/sh", "-ec", script}, {}, std::chrono::seconds(120), cwd);
    return r.exit_code == 0 ? r.out : "<failed: " + r.err + ">";
  };
  sh(base, "git init -q repo && cd repo && git config user.name t && git config user.email t@t && "
           "mkdir -p src && echo 'fn main() {}' > src/main.rs && echo 'line 1' > f1.txt && echo 'line 2' > f2.txt && "
           "echo keep > f3.txt && git add -A && git commit -qm init");
  const std::string tree = sh(base + "/repo", "git rev-parse HEAD^{tree}").substr(0, 40);
  start_runner();
  auto prepared = runner_->client_in(base + "/repo", {"workspace", "prepare", "-w", "k"}, {"XDG_CACHE_HOME=" + base + "/cache"});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err << runner_->log();

  RawClient c(runner_->socket());
  auto one = run_vm(c, "pwd; cat main.rs ../f1.txt; echo edited >> ../f1.txt; rm ../f2.txt; echo new > ../new.txt; "
                       "mkdir -p ../target && echo built > ../target/out; echo done",
                    R"(,"workspace_key":"k","cwd":"src","timeout":6)");
  ASSERT_TRUE(one.started) << one.terminal << runner_->log();
  EXPECT_EQ(json_field(one.terminal, "/outcome/type"), "exit") << one.terminal << runner_->log();
  EXPECT_EQ(json_field(one.terminal, "/outcome/code"), "0") << one.terminal;
  EXPECT_EQ(json_field(one.terminal, "/killed"), "<missing>") << "the deadline must count from started, not from admission";
  EXPECT_EQ(one.out, "/data/work/src\nfn main() {}\nline 1\ndone\n") << one.err;
  EXPECT_EQ(json_field(one.terminal, "/tree_hash"), tree);
  EXPECT_EQ(json_field(one.terminal, "/workspace_changes"), R"(["f1.txt","f2.txt","new.txt","target/out"])") << one.terminal;
  EXPECT_EQ(json_field(one.terminal, "/untracked_files/paths"), R"(["new.txt","target/out"])") << one.terminal;
  expect_torn_down(*runner_, one.job_id);

  // The caller deletes f3.txt and prepares again. Same key: the prepared tree is delivered again
  // (f1 and f2 as prepared, f3 gone from the guest's copy too), the job's new files are still on
  // the data disk, and a job that changes nothing reports [].
  sh(base + "/repo", "rm f3.txt");
  auto again = runner_->client_in(base + "/repo", {"workspace", "prepare", "-w", "k"}, {"XDG_CACHE_HOME=" + base + "/cache"});
  ASSERT_EQ(again.exit_code, 0) << again.err << runner_->log();
  auto two = run_vm(c, "cat f1.txt f2.txt new.txt target/out; ls f3.txt 2>/dev/null || true", R"(,"workspace_key":"k")", 2);
  EXPECT_EQ(json_field(two.terminal, "/outcome/code"), "0") << two.terminal << two.err;
  EXPECT_EQ(two.out, "line 1\nline 2\nnew\nbuilt\n") << "f3.txt, deleted by the caller, must be gone in the guest too; " << two.err;
  EXPECT_EQ(json_field(two.terminal, "/workspace_changes"), "[]") << two.terminal;
  expect_torn_down(*runner_, two.job_id);
}

// A guest that lies in its listing (here the test guest's /motor/run-hostile, which replaces the
// listing with what the job wrote) gets a null report and a logged reason; the runner stays fine.
TEST_F(VmJobs, AHostileOrOversizedListingIsNotBelieved) {
  start_runner(std::string(kTcg) + "vm_guest_runner = /motor/run-hostile\n");
  RawClient c(runner_->socket());
  auto lying = run_vm(c, "printf 'motor-changes 1\\nM ok.txt\\nA ../../etc/passwd\\nend\\n' > .hostile-listing; echo ok");
  ASSERT_TRUE(lying.started) << lying.terminal << runner_->log();
  EXPECT_EQ(json_field(lying.terminal, "/outcome/code"), "0") << lying.terminal;
  EXPECT_EQ(json_field(lying.terminal, "/workspace_changes"), "null") << lying.terminal;
  EXPECT_EQ(json_field(lying.terminal, "/untracked_files"), "<missing>") << lying.terminal;
  EXPECT_NE(runner_->log().find("listing is not believed: line 3: a \".\" or \"..\" path component"), std::string::npos)
      << runner_->log();
  expect_torn_down(*runner_, lying.job_id);

  // 4 MB of well-formed lines: refused once the reader passes its 1 MiB bound, not held whole.
  auto big = run_vm(c, "(echo 'motor-changes 1'; yes 'A aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' | head -c 4000000) > .hostile-listing", "", 2);
  EXPECT_EQ(json_field(big.terminal, "/outcome/code"), "0") << big.terminal;
  EXPECT_EQ(json_field(big.terminal, "/workspace_changes"), "null") << big.terminal;
  EXPECT_NE(runner_->log().find("is over 1048576 bytes"), std::string::npos) << runner_->log();
  EXPECT_LT(peak_rss_bytes(runner_->pid()), int64_t{96} << 20);
  RawClient other(runner_->socket());
  ASSERT_TRUE(other.send_frame(R"({"id":7,"method":"runner.status","params":{}})"));
  EXPECT_TRUE(other.read_frame(std::chrono::milliseconds(10000))) << "the runner must still answer";
  expect_torn_down(*runner_, big.job_id);
}

}  // namespace
}  // namespace motor::test
