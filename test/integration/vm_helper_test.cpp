// motor-vm-helper's calls that are not libvirt's (QEMU as a systemd unit, docs/windows-jobs.md):
// `qmp-cont SOCKET` against a QMP monitor of the test's own (a thread on a Unix socket in a
// temporary directory), and `remove DIR...`. The real QEMU's side is test/systemd/unit-backend.sh.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

std::string helper() {
  const std::string bin = MOTOR_RUNNER_TESTING_BIN;
  return bin.substr(0, bin.rfind('/')) + "/motor-vm-helper";
}

// A QMP monitor that greets, answers qmp_capabilities, sends an event, then answers `cont` with
// `cont_answer`; it starts listening after `delay`. Records what it was asked.
class FakeMonitor {
 public:
  FakeMonitor(std::string path, std::chrono::milliseconds delay, std::string cont_answer)
      : path_(std::move(path)), thread_([this, delay, answer = std::move(cont_answer)] { serve(delay, answer); }) {}
  ~FakeMonitor() {
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) close(listener_);
  }
  std::string asked() {
    if (thread_.joinable()) thread_.join();
    return asked_;
  }

 private:
  void serve(std::chrono::milliseconds delay, const std::string& cont_answer) {
    std::this_thread::sleep_for(delay);
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener_, 1) != 0) return;
    timeval limit{15, 0};  // a helper that never comes must not hang the test
    setsockopt(listener_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    const int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    auto say = [fd](const std::string& line) { (void)!write(fd, (line + "\n").data(), line.size() + 1); };
    say(R"({"QMP": {"version": {}, "capabilities": []}})");
    std::string buffer;
    char chunk[512];
    for (int answered = 0; answered < 2;) {
      const ssize_t n = read(fd, chunk, sizeof chunk);
      if (n <= 0) break;
      buffer.append(chunk, static_cast<size_t>(n));
      for (size_t nl; answered < 2 && (nl = buffer.find('\n')) != std::string::npos; ++answered) {
        asked_ += buffer.substr(0, nl) + "\n";
        buffer.erase(0, nl + 1);
        say(R"({"event": "RESUME", "data": {}})");  // events come between answers: skipped
        say(answered == 0 ? R"({"return": {}})" : cont_answer);
      }
    }
    close(fd);
  }

  std::string path_;
  int listener_ = -1;
  std::string asked_;
  std::thread thread_;
};

class VmHelper : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(); }
  void TearDown() override { remove_tree(dir_); }
  std::string dir_;
};

TEST_F(VmHelper, QmpContWaitsForTheMonitorSocketQemuHasNotMadeYet) {
  FakeMonitor monitor(dir_ + "/qmp.sock", std::chrono::milliseconds(300), R"({"return": {}})");
  auto r = run_program({helper(), "qmp-cont", dir_ + "/qmp.sock"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "ok\n");
  EXPECT_EQ(monitor.asked(), "{\"execute\": \"qmp_capabilities\"}\n{\"execute\": \"cont\"}\n");
}

TEST_F(VmHelper, QmpContReportsTheMonitorsErrorInOnePrintableLine) {
  FakeMonitor monitor(dir_ + "/qmp.sock", std::chrono::milliseconds(0),
                      R"({"error": {"class": "GenericError", "desc": "no, not now"}})");
  auto r = run_program({helper(), "qmp-cont", dir_ + "/qmp.sock"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out.rfind("error cont: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("no, not now"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_TRUE(std::all_of(r.out.begin(), r.out.end(), [](char c) { return c == '\n' || (c >= 0x20 && c < 0x7f); })) << r.out;
}

TEST_F(VmHelper, QmpContRefusesAPathTooLongForASocketInOneLineOfItsOwn) {
  // libvirt is never called by qmp-cont: its last error (unset, uninitialised) is not appended.
  auto r = run_program({helper(), "qmp-cont", dir_ + "/" + std::string(200, 'q')}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "error the monitor's socket path is too long\n");
}

TEST_F(VmHelper, RemoveDeletesEachTreeAndToleratesOneAlreadyGone) {
  std::filesystem::create_directories(dir_ + "/job/disks");
  write_file(dir_ + "/job/disks/overlay.qcow2", "x");
  std::filesystem::create_directories(dir_ + "/job.root/usr");
  auto r = run_program({helper(), "remove", dir_ + "/job", dir_ + "/job.root", dir_ + "/never-made"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "ok\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/job"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/job.root"));
}

}  // namespace
}  // namespace motor::test
