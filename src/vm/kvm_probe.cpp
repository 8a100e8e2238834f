#include "vm/kvm_probe.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/kvm.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "motor/unique_fd.hpp"

namespace motor::vm {
namespace {

// What the child reached; written to the parent as two ints.
enum Step : int { kOpen = 1, kApiVersion, kCreateVm, kMemory, kCreateVcpu, kMapRun, kSetRegs, kRun, kWrongExit, kUsable };

const char* step_text(int step) {
  switch (step) {
    case kOpen: return "cannot open it read-write";
    case kApiVersion: return "KVM_GET_API_VERSION is not 12";
    case kCreateVm: return "KVM_CREATE_VM failed";
    case kMemory: return "KVM_SET_USER_MEMORY_REGION failed";
    case kCreateVcpu: return "KVM_CREATE_VCPU failed";
    case kMapRun: return "cannot map the vCPU's run area";
    case kSetRegs: return "cannot set the test guest's registers";
    case kRun: return "KVM_RUN failed";
    case kWrongExit: return "the real-mode test guest did not reach its OUT and HLT";
    default: return "unknown step";
  }
}

[[noreturn]] void report_and_exit(int out, int step, int err) {
  const int result[2] = {step, err};
  (void)!write(out, result, sizeof result);
  _exit(0);
}

// Runs in the forked child, as the account: only system calls (the parent may have threads).
[[noreturn]] void probe_child(int out, const char* device, const std::vector<gid_t>& groups, uid_t uid, gid_t gid) {
  auto report = [out](int step, int err) { report_and_exit(out, step, err); };
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  signal(SIGALRM, SIG_DFL);
  sigprocmask(SIG_UNBLOCK, &alarm_only, nullptr);
  alarm(5);  // a KVM that never returns from KVM_RUN kills the child: the parent reads EOF
  if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0) report(0, errno);
  const int kvm = open(device, O_RDWR | O_CLOEXEC);
  if (kvm < 0) report(kOpen, errno);
  if (ioctl(kvm, KVM_GET_API_VERSION, 0) != 12) report(kApiVersion, errno);
  const int vm = ioctl(kvm, KVM_CREATE_VM, 0);
  if (vm < 0) report(kCreateVm, errno);
  // mov al, 0x42; out 0x10, al; hlt
  static const unsigned char kCode[] = {0xb0, 0x42, 0xe6, 0x10, 0xf4};
  void* mem = mmap(nullptr, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) report(kMemory, errno);
  std::memcpy(mem, kCode, sizeof kCode);
  kvm_userspace_memory_region region{};
  region.slot = 0;
  region.guest_phys_addr = 0x1000;
  region.memory_size = 0x1000;
  region.userspace_addr = reinterpret_cast<uintptr_t>(mem);
  if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) != 0) report(kMemory, errno);
  const int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
  if (vcpu < 0) report(kCreateVcpu, errno);
  const int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size <= 0) report(kMapRun, errno);
  void* run_area = mmap(nullptr, static_cast<size_t>(run_size), PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
  if (run_area == MAP_FAILED) report(kMapRun, errno);
  auto* run = static_cast<kvm_run*>(run_area);
  kvm_sregs sregs{};
  if (ioctl(vcpu, KVM_GET_SREGS, &sregs) != 0) report(kSetRegs, errno);
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  if (ioctl(vcpu, KVM_SET_SREGS, &sregs) != 0) report(kSetRegs, errno);
  kvm_regs regs{};
  regs.rip = 0x1000;
  regs.rflags = 2;
  if (ioctl(vcpu, KVM_SET_REGS, &regs) != 0) report(kSetRegs, errno);
  if (ioctl(vcpu, KVM_RUN, 0) != 0) report(kRun, errno);
  const auto* io_byte = static_cast<const unsigned char*>(run_area) + run->io.data_offset;
  if (run->exit_reason != KVM_EXIT_IO || run->io.port != 0x10 || *io_byte != 0x42) report(kWrongExit, 0);
  if (ioctl(vcpu, KVM_RUN, 0) != 0) report(kRun, errno);
  if (run->exit_reason != KVM_EXIT_HLT) report(kWrongExit, 0);
  report_and_exit(out, kUsable, 0);
}

// Runs the device checks as the account; nullopt when the test guest halted as it should.
std::optional<std::string> probe_device_as(const sandbox::Account& account, const std::string& device) {
  const std::string where = "as " + account.name + ", " + device;
  int count = 64;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (getgrouplist(account.name.c_str(), account.gid, groups.data(), &count) < 0) {
    return "cannot list the groups of " + account.name;
  }
  groups.resize(static_cast<size_t>(count));
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) probe_child(write_end.get(), device.c_str(), groups, account.uid, account.gid);
  write_end = UniqueFd();
  int result[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof result) {
    const ssize_t n = read(read_end.get(), reinterpret_cast<char*>(result) + got, sizeof result - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got < sizeof result) {
    return where + ": the probe died (" +
           (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? std::string("the test guest did not halt within 5 s")
                                                               : "status " + std::to_string(status)) +
           ")";
  }
  if (result[0] == kUsable) return std::nullopt;
  if (result[0] == 0) return "cannot switch to " + account.name + ": " + std::strerror(result[1]);
  std::string why = where + ": " + step_text(result[0]);
  if (result[1] != 0) why += std::string(" (") + std::strerror(result[1]) + ")";
  return why;
}

}  // namespace

std::optional<std::string> kvm_unusable(const sandbox::Account& account, const KvmProbePaths& paths) {
  struct stat st {};
  if (stat(paths.device.c_str(), &st) != 0) return paths.device + ": " + std::strerror(errno);
  if (!S_ISCHR(st.st_mode)) return paths.device + " is not a character device";
  if (auto why = probe_device_as(account, paths.device)) return why;
  // A paravirtual KVM runs the tiny guest too (it emulates real mode) but dies booting a stock
  // kernel: what serves /dev/kvm decides.
  std::ifstream cpuinfo(paths.cpuinfo);
  bool hardware = false;
  for (std::string line; !hardware && std::getline(cpuinfo, line);) {
    if (!line.starts_with("flags")) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) hardware = hardware || w == "vmx" || w == "svm";
  }
  if (!hardware) {
    return "the CPU offers no hardware virtualization (no vmx or svm flag in " + paths.cpuinfo +
           "): a stock guest kernel cannot boot on this KVM";
  }
  if (stat((paths.sys_module + "/kvm_pvm").c_str(), &st) == 0) {
    return "KVM here is the PVM paravirtual variant (" + paths.sys_module + "/kvm_pvm), which runs only guests built for it";
  }
  return std::nullopt;
}

}  // namespace motor::vm
