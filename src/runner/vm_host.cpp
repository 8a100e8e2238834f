#include "runner/vm_host.hpp"

#include <dirent.h>
#include <errno.h>
#include <libvirt/virterror.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string_view>

#include "reactor/libvirt_loop.hpp"
#include "reactor/slow_call.hpp"
#include "base/log.hpp"
#include "runner/qemu_unit.hpp"
#include "vm/kvm_probe.hpp"

namespace motor::runner {
namespace {

constexpr const char* kDomainPrefix = "motor-";

std::string libvirt_error() {
  const char* e = virGetLastErrorMessage();
  return e ? e : "unknown libvirt error";
}

// Every directory from `dir` up must let others search it (motor-qemu reaches its files there).
std::optional<std::string> unsearchable_ancestor(const std::string& dir) {
  std::string path = dir;
  while (!path.empty()) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return path + " does not exist";
    if (!(st.st_mode & S_IXOTH)) return path + " is not searchable by the QEMU account (mode o+x is missing)";
    const auto slash = path.rfind('/');
    if (slash == 0 || slash == std::string::npos) break;
    path.resize(slash);
  }
  return std::nullopt;
}

int on_lifecycle(virConnectPtr, virDomainPtr dom, int event, int detail, void*) {
  const char* name = virDomainGetName(dom);
  if (name && std::string_view(name).starts_with(kDomainPrefix) &&
      (event == VIR_DOMAIN_EVENT_STOPPED || event == VIR_DOMAIN_EVENT_CRASHED)) {
    log_info("libvirt: domain {} {} (detail {})", name, event == VIR_DOMAIN_EVENT_CRASHED ? "crashed" : "stopped", detail);
  }
  return 0;
}

}  // namespace

std::unique_ptr<VmHost> VmHost::create(uv_loop_t* loop, const config::Config& config, const std::string& init_path,
                                       SystemdUnits* units) {
  std::unique_ptr<VmHost> host(new VmHost(loop, config, units));
  host->setup(init_path);
  if (host->unavailable_) {
    if (!config.vm_image.empty()) log_warning("windows jobs are refused: {}", *host->unavailable_);
  } else {
    log_info("windows jobs: {} through {}, image {}", host->emulated_ ? "TCG emulation (allow_emulation = true)" : "KVM (usable by motor-qemu)",
             units ? "QEMU as systemd units (job_backend = systemd)" : config.libvirt_uri, config.vm_image);
  }
  return host;
}

VmHost::~VmHost() {
  if (conn_) {
    if (lifecycle_callback_ >= 0) virConnectDomainEventDeregisterAny(conn_, lifecycle_callback_);
    virConnectClose(conn_);
  }
  // The runner is stopping and its VM jobs have ended: the VMs' pids cgroup parent goes too when
  // it is empty (jobs create it on demand; rmdir never removes one in use).
  retirement_.reap_all_now();
  rmdir(("/sys/fs/cgroup/pids/" + config_.cgroup_parent + "-vm").c_str());
}

void VmHost::setup(const std::string& init_path) {
  if (config_.vm_image.empty()) {
    unavailable_ = "this runner does not run \"windows\" jobs (vm_image is not set in its config)";
    return;
  }
  if (auto why = check_files_and_accounts(init_path)) {
    unavailable_ = *why;
    return;
  }
  if (auto why = units_ ? std::nullopt : connect_libvirt()) {
    unavailable_ = *why;
    return;
  }
  if (auto why = choose_accelerator()) {
    unavailable_ = *why;
    return;
  }
  recover_leftovers();
}

std::optional<std::string> VmHost::check_files_and_accounts(const std::string& init_path) {
  const config::Config& c = config_;
  for (const std::string* f : {&c.vm_image, &c.vm_kernel, &c.vm_initrd}) {
    struct stat st {};
    if (!f->empty() && (stat(f->c_str(), &st) != 0 || !S_ISREG(st.st_mode))) return *f + " (from the config) is not a file";
  }
  auto qemu = sandbox::lookup_unprivileged_account("motor-qemu");
  if (!qemu) return "the motor-qemu account: " + qemu.error().message + " (scripts/setup creates it)";
  qemu_account_ = *qemu;
  if (!c.vm_prepare_command.empty()) {
    auto prep = sandbox::lookup_unprivileged_account("motor-prep");
    if (!prep) {
      return "the motor-prep account (vm_prepare_command is set): " + prep.error().message + " (scripts/setup creates it)";
    }
    prep_account_ = *prep;
  }
  init_path_ = init_path;
  helper_path_ = init_path.substr(0, init_path.rfind('/')) + "/motor-vm-helper";
  char self[4096];
  if (const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1); n > 0) {
    const std::string exe(self, static_cast<size_t>(n));
    helper_path_ = exe.substr(0, exe.rfind('/')) + "/motor-vm-helper";
  }
  if (access(helper_path_.c_str(), X_OK) != 0) return "motor-vm-helper is not at " + helper_path_ + " (it is built beside motor-runner)";
  for (const std::string* dir : {&c.vm_dir, &c.vm_data_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(*dir, ec);
    if (ec || chmod(dir->c_str(), 0711) != 0) {
      return "cannot create " + *dir + ": " + (ec ? ec.message() : std::string(std::strerror(errno)));
    }
    if (auto why = unsearchable_ancestor(*dir)) return *why + " (vm_dir / vm_data_dir)";
  }
  return std::nullopt;
}

std::optional<std::string> VmHost::connect_libvirt() {
  virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});  // errors are read from return values, not printed
  if (auto s = reactor::register_libvirt_loop(loop_); !s) return s.error().message;
  {
    reactor::SlowCall timed("connecting to libvirt");
    conn_ = virConnectOpen(config_.libvirt_uri.c_str());
  }
  if (!conn_) return "cannot connect to libvirt at " + config_.libvirt_uri + " (libvirt_uri): " + libvirt_error();
  // Keepalives and domain events run on the runner's loop from now on.
  if (virConnectSetKeepAlive(conn_, 5, 3) != 0) log_warning("libvirt keepalive: {}", libvirt_error());
  lifecycle_callback_ = virConnectDomainEventRegisterAny(conn_, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                                         VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), nullptr, nullptr);
  return std::nullopt;
}

// KVM as QEMU will use it: probed as motor-qemu, not asked of libvirt (which probes as root
// and reports KVM where motor-qemu cannot open /dev/kvm or the KVM cannot boot a stock kernel).
std::optional<std::string> VmHost::choose_accelerator() {
  std::optional<std::string> kvm_unusable;
  if (config_.vm_accelerator != vm::Accelerator::kTcg) {
    reactor::SlowCall timed("probing KVM as motor-qemu");
    kvm_unusable = vm::kvm_unusable(qemu_account_);
  }
  const vm::AcceleratorChoice choice = vm::choose_accelerator(config_.vm_accelerator, config_.allow_emulation, kvm_unusable);
  if (choice.refused) return *choice.refused;
  emulated_ = choice.emulated;
  if (emulated_ && kvm_unusable) log_info("windows jobs: not KVM because {}", *kvm_unusable);
  return std::nullopt;
}

// Job directories in vm_dir belong to VM jobs of a runner that stopped without tearing them down:
// destroy their domains (by name; a helper each) and delete their overlays. Under job_backend =
// systemd their QEMU units are gone already (SystemdUnits::start stopped them, as job units):
// the directories and the units' roots (<job>.root) are deleted.
void VmHost::recover_leftovers() {
  DIR* d = opendir(config_.vm_dir.c_str());
  if (!d) return;
  std::set<std::string> names, roots;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    (name.ends_with(".root") ? roots : names).insert(name);
  }
  closedir(d);
  // A QEMU unit's root whose job directory is gone (a runner that died between the two deletions).
  for (const auto& root : roots) {
    if (units_) names.insert(root.substr(0, root.size() - std::string_view(".root").size()));
  }
  for (const auto& name : names) {
    const std::string dir = config_.vm_dir + "/" + name;
    (void)vm::unmount_prep_output(dir + "/prep");  // a preparation's result, if it was mounted
    if (units_) {
      log_warning("VM job {} was left by an earlier runner: its QEMU unit is stopped; deleting its files", name);
      auto call = vm::HelperCall::start(loop_, helper_path_, {"remove", dir, QemuUnit::root_dir_for(dir)}, 120000,
                                        [this, name](Expected<std::string> r) {
                                          if (!r) log_warning("deleting VM job {}'s directory: {}", name, r.error().message);
                                          recovery_.erase(name);  // destroys this call: nothing runs after it
                                        });
      if (call) recovery_[name] = std::move(*call);
      continue;
    }
    log_warning("VM job {} was left running by an earlier runner: destroying its domain", name);
    auto call = vm::HelperCall::start(loop_, helper_path_, {"destroy", config_.libvirt_uri, kDomainPrefix + name, dir}, 120000,
                                      [this, name](Expected<std::string> r) {
                                        if (!r) log_warning("destroying domain {}{}: {}", kDomainPrefix, name, r.error().message);
                                        // QEMU may still be exiting: a busy cgroup is removed in the background.
                                        const std::string pids = "/sys/fs/cgroup/pids/" + config_.cgroup_parent + "-vm/" + name;
                                        retirement_.reap(sandbox::remains_of_dirs({pids}, "VM job " + name));
                                        recovery_.erase(name);  // destroys this call: nothing runs after it
                                      });
    if (call) recovery_[name] = std::move(*call);
  }
}

vm::VmJobSpec VmHost::job_spec(const std::string& job_id, const std::string& caller, const std::string& workspace_key,
                               const std::string& workspace_dir, const std::vector<std::string>& argv,
                               const std::vector<std::string>& env, const CpuClaim& cpus, int64_t memory_bytes,
                               const sandbox::Account& job_account,
                               std::optional<sandbox::JobNetworkPlan> prep_network) const {
  vm::VmJobSpec s;
  s.job_id = job_id;
  s.domain_name = kDomainPrefix + job_id;
  s.work_dir = config_.vm_dir + "/" + job_id;
  s.libvirt_uri = config_.libvirt_uri;
  s.helper_path = helper_path_;
  s.init_path = init_path_;
  s.emulated = emulated_;
  s.sealed_image = config_.vm_image;
  s.kernel = config_.vm_kernel;
  s.initrd = config_.vm_initrd;
  s.cmdline = config_.vm_kernel_cmdline;
  s.data_disk = config_.vm_data_dir + "/" + caller + "/" + workspace_key + ".img";
  s.data_disk_bytes = config_.vm_data_disk_bytes;
  // The transfer disk carries the workspace tree; an empty workspace needs none.
  if (DIR* d = opendir(workspace_dir.c_str())) {
    bool empty = true;
    while (dirent* e = readdir(d)) {
      if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..") {
        empty = false;
        break;
      }
    }
    closedir(d);
    if (!empty) s.transfer_source = workspace_dir;
  }
  s.cpus = cpus.cpus;
  s.memory_bytes = memory_bytes;
  s.hard_limit_bytes = memory_bytes + config_.vm_memory_overhead_bytes;
  s.pids_max = std::min<int64_t>(config_.pids_max, 1024);
  s.qemu_account = qemu_account_;
  s.tool_account = job_account;
  if (units_) {
    QemuUnitSpec unit{job_id, caller, helper_path_, s.work_dir, QemuUnit::root_dir_for(s.work_dir), qemu_account_.name,
                      s.hard_limit_bytes, s.pids_max, s.cpus, !emulated_};
    s.make_launcher = [loop = loop_, units = units_, unit] { return std::make_unique<QemuUnit>(loop, *units, unit); };
  }
  // Not below cgroup_parent: that holds job cgroups in every hierarchy, which a restarted runner
  // kills and removes; QEMU's pids cgroup is in the pids hierarchy only.
  s.pids_cgroup = config_.cgroup_parent + "-vm/" + job_id;
  s.disk_cgroup = "vmdisk-" + job_id;
  s.guest_runner = config_.vm_guest_runner;
  s.argv = argv;
  s.env = env;
  s.agent_timeout_ms = static_cast<uint64_t>(config_.vm_agent_timeout_s) * 1000;
  s.max_output_bytes = config_.vm_output_max_bytes;
  if (!config_.vm_prepare_command.empty()) {
    vm::PrepSpec& p = s.prep.emplace();
    p.command = config_.vm_prepare_command;
    p.workspace_dir = workspace_dir;
    p.max_bytes = config_.vm_prepare_max_bytes;
    p.timeout_ms = static_cast<uint64_t>(config_.vm_prepare_timeout_s) * 1000;
    p.account = prep_account_;
    p.workspace_owner = job_account;
    p.init_path = init_path_;
    p.cgroup_name = "vmprep-" + job_id;
    p.limits.memory_bytes = memory_bytes;
    p.limits.pids_max = config_.pids_max;
    p.limits.cpus = cpus.list();
    p.read_only_paths = config_.cache_paths;
    p.network = std::move(prep_network);
    p.tmp_bytes = static_cast<uint64_t>(config_.job_tmp_bytes);
  }
  return s;
}

}  // namespace motor::runner
