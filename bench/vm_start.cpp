// VM job latency by phase (issue 8), against qemu-system-x86_64 started directly with the same
// disks, kernel and guest in the same run, interleaved; and the runner loop's worst stall while
// a VM job starts, runs and is torn down.
//
//  Motor:  a platform "windows" job running `true` through a real runner; its phases come from
//          the runner's own log line ("VM phases (ms): disks, domain start, agent ready, command,
//          teardown"): overlay (confined qemu-img), domain created paused + confinement checked +
//          resumed (motor-vm-helper), guest agent answering guest-sync, the command's round trip
//          (file-open x2, guest-exec, reads and exec-status until exit), destroy + cleanup.
//  Direct: qemu-img create (plain), qemu-system-x86_64 spawned (until its agent socket
//          accepts), guest-sync answered, guest-exec + guest-exec-status until exit, SIGTERM and
//          wait.
// Under TCG (these machines) boot dominates "agent ready"; the ratios of the other phases are
// what Motor adds. Usage: motor_bench_vm [runs] (default 3). Needs scripts/build-test-guest.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "stats.hpp"
#include "support/runner_harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using motor::bench::median;
using motor::test::json_field;
using motor::test::RawClient;
using motor::test::RunnerProcess;

const std::string kGuest = motor::test::test_guest_dir();

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Phases {
  double overlay = 0, start = 0, agent = 0, command = 0, teardown = 0, total = 0, stall_ms = 0;
};

// A blocking guest-agent exchange: one request line, one JSON object back.
std::string qga(int fd, const std::string& line) {
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return {};
  std::string msg;
  int depth = 0;
  bool in_str = false, esc = false;
  char c;
  while (read(fd, &c, 1) == 1) {
    if (depth == 0 && c != '{') continue;
    msg += c;
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') in_str = true;
    else if (c == '{') ++depth;
    else if (c == '}' && --depth == 0) return msg;
  }
  return {};
}

Phases direct_once(const std::string& dir) {
  Phases p;
  const std::string overlay = dir + "/direct.qcow2", data = dir + "/direct-data.img", sock = dir + "/direct-agent.sock";
  unlink(overlay.c_str());
  unlink(sock.c_str());
  auto t0 = Clock::now();
  const auto total0 = t0;
  motor::test::run_program({"/usr/bin/qemu-img", "create", "-q", "-f", "qcow2", "-b", kGuest + "/base.qcow2", "-F", "qcow2", overlay});
  p.overlay = ms_since(t0);
  if (access(data.c_str(), F_OK) != 0) motor::test::run_program({"/usr/bin/truncate", "-s", "64M", data});

  t0 = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/usr/bin/qemu-system-x86_64", "qemu-system-x86_64", "-M", "pc", "-accel", "tcg", "-m", "256", "-smp", "1",
          "-nodefaults", "-nographic", "-display", "none", "-serial", "null", "-monitor", "none", "-nic", "none", "-kernel",
          (kGuest + "/vmlinuz").c_str(), "-initrd", (kGuest + "/initrd.img").c_str(), "-append", "console=ttyS0 panic=-1",
          "-drive", ("file=" + overlay + ",if=virtio,format=qcow2,cache=none").c_str(), "-drive",
          ("file=" + data + ",if=virtio,format=raw,cache=none").c_str(), "-device", "virtio-serial", "-chardev",
          ("socket,path=" + sock + ",server=on,wait=off,id=qga0").c_str(), "-device",
          "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0", static_cast<char*>(nullptr));
    _exit(127);
  }
  int fd = -1;
  for (int i = 0; i < 5000 && fd < 0; ++i) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock.c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd);
      fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  p.start = ms_since(t0);
  t0 = Clock::now();
  qga(fd, "{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":4242}}\n");
  p.agent = ms_since(t0);
  t0 = Clock::now();
  const std::string r = qga(fd, R"({"execute":"guest-exec","arguments":{"path":"/motor/run","arg":["/run/o","/run/e","/run/c",".","true"]}})" "\n");
  const std::string gpid = json_field(r, "/return/pid");
  for (int i = 0; i < 10000; ++i) {
    const std::string st = qga(fd, "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":" + gpid + "}}\n");
    if (json_field(st, "/return/exited") == "true") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  p.command = ms_since(t0);
  close(fd);
  t0 = Clock::now();
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  unlink(overlay.c_str());
  p.teardown = ms_since(t0);
  p.total = ms_since(total0);
  return p;
}

bool motor_once(RunnerProcess& runner, Phases& p) {
  RawClient status(runner.socket());
  status.send_frame(R"({"id":1,"method":"runner.status","params":{"reset_stall":true}})");
  (void)status.read_frame();
  RawClient c(runner.socket());
  const auto t0 = Clock::now();
  c.send_frame(R"({"id":1,"method":"exec.run","params":{"command":"true","platform":"windows","memory":"256M"}})");
  std::string terminal;
  while (auto f = c.read_frame(std::chrono::milliseconds(240000))) {
    if (json_field(*f, "/type") == "terminal") {
      terminal = *f;
      break;
    }
  }
  p.total = ms_since(t0);
  if (json_field(terminal, "/outcome/code") != "0") {
    fmt::print(stderr, "VM job failed: {}\n{}\n", terminal, runner.log());
    return false;
  }
  status.send_frame(R"({"id":2,"method":"runner.status","params":{}})");
  if (auto s = status.read_frame()) p.stall_ms = std::atof(json_field(*s, "/result/loop_worst_stall_us").c_str()) / 1000.0;
  const std::string log = runner.log();
  static const std::regex re(
      R"(VM phases \(ms\): (?:prepare \d+, )?disks (\d+), domain start (\d+), agent ready (\d+), command (\d+), teardown (\d+))");
  std::smatch m, last;
  for (auto it = log.cbegin(); std::regex_search(it, log.cend(), m, re); it = m.suffix().first) last = m;
  if (last.empty()) {
    fmt::print(stderr, "no \"VM phases\" line in the runner's log:\n{}\n", log);
    return false;
  }
  p.overlay = std::stod(last[1]);
  p.start = std::stod(last[2]);
  p.agent = std::stod(last[3]);
  p.command = std::stod(last[4]);
  p.teardown = std::stod(last[5]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  struct stat st {};
  if (stat((kGuest + "/base.qcow2").c_str(), &st) != 0) {
    fmt::print(stderr, "no test guest: run scripts/build-test-guest\n");
    return 1;
  }
  RunnerProcess runner("");
  const std::string dir = runner.dir();
  motor::test::write_file(dir + "/runner.conf",
                          motor::test::read_file(dir + "/runner.conf") + "vm_image = " + kGuest + "/base.qcow2\nvm_kernel = " +
                              kGuest + "/vmlinuz\nvm_initrd = " + kGuest +
                              "/initrd.img\nvm_kernel_cmdline = \"console=ttyS0 panic=-1\"\nvm_accelerator = tcg\nallow_emulation = true\nvm_dir = " +
                              dir + "/vm\nvm_data_dir = " + dir + "/vm-data\nvm_data_disk_size = 64M\nvm_memory_overhead = 256M\n");
  if (!runner.start()) {
    fmt::print(stderr, "runner did not start:\n{}\n", runner.log());
    return 1;
  }
  std::vector<Phases> motor, direct;
  for (int i = 0; i < runs; ++i) {
    Phases m;
    if (!motor_once(runner, m)) return 1;
    motor.push_back(m);
    direct.push_back(direct_once(dir));
  }
  auto med = [](const std::vector<Phases>& v, double Phases::*f) {
    std::vector<double> x;
    for (const auto& p : v) x.push_back(p.*f);
    return median(x);
  };
  fmt::print("VM job phases, medians of {} runs each, interleaved (TCG; ms):\n", runs);
  fmt::print("  {:<14} {:>10} {:>10} {:>8}\n", "phase", "motor", "direct", "ratio");
  const std::pair<const char*, double Phases::*> rows[] = {{"overlay", &Phases::overlay},   {"domain start", &Phases::start},
                                                           {"agent ready", &Phases::agent}, {"command", &Phases::command},
                                                           {"teardown", &Phases::teardown}, {"total", &Phases::total}};
  for (const auto& [name, f] : rows) {
    const double a = med(motor, f), b = med(direct, f);
    fmt::print("  {:<14} {:>10.1f} {:>10.1f} {:>8.2f}\n", name, a, b, b > 0 ? a / b : 0.0);
  }
  fmt::print("runner loop's worst stall during a VM job (start to teardown): median {:.1f} ms, max {:.1f} ms\n",
             med(motor, &Phases::stall_ms), [&] {
               double mx = 0;
               for (const auto& p : motor) mx = std::max(mx, p.stall_ms);
               return mx;
             }());
  runner.stop();
  // QEMU's pids cgroups live under "<cgroup parent>-vm" in the pids hierarchy: the runner keeps
  // that parent (as it keeps its own); the benchmark's is removed with it.
  rmdir(("/sys/fs/cgroup/pids/" + runner.cgroup_parent() + "-vm").c_str());
  return 0;
}
