// What the runner needs to run VM jobs (platform "windows", issue 8), set up once at start:
// the QEMU account, motor-vm-helper, the VM directories, who starts QEMU (libvirt, whose
// connection's events and keepalives run on the runner's loop; or, under job_backend = systemd,
// the runner itself as a transient unit: qemu_unit.hpp), and whether KVM is there (or emulation
// is allowed).
// A host that cannot run VMs says why; windows jobs are then refused with that reason, and
// Linux jobs are not affected.
#pragma once

#include <libvirt/libvirt.h>
#include <uv.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "sandbox/cgroup_reaper.hpp"
#include "runner/cpu_claims.hpp"
#include "runner/systemd_units.hpp"
#include "sandbox/accounts.hpp"
#include "vm/helper_call.hpp"
#include "vm/vm_job.hpp"

namespace motor::runner {

class VmHost {
 public:
  // `units`: the systemd backend's bus (job_backend = systemd), or null: QEMU through libvirt.
  static std::unique_ptr<VmHost> create(uv_loop_t* loop, const config::Config& config, const std::string& init_path,
                                        SystemdUnits* units);
  ~VmHost();
  VmHost(const VmHost&) = delete;
  VmHost& operator=(const VmHost&) = delete;

  // Why windows jobs cannot run here (names the setting to change), or nullopt.
  const std::optional<std::string>& unavailable() const { return unavailable_; }
  bool emulated() const { return emulated_; }
  // Memory QEMU may use beyond the guest's RAM: reserved at admission with the job's memory.
  int64_t memory_overhead() const { return config_.vm_memory_overhead_bytes; }

  vm::VmJobSpec job_spec(const std::string& job_id, const std::string& caller, const std::string& workspace_key,
                         const std::string& workspace_dir, const std::vector<std::string>& argv,
                         const std::vector<std::string>& env, const CpuClaim& cpus, int64_t memory_bytes,
                         const sandbox::Account& job_account,
                         std::optional<sandbox::JobNetworkPlan> prep_network = std::nullopt) const;
  // Whether VM jobs run a dependency preparation first (vm_prepare_command is set).
  bool prepares() const { return !config_.vm_prepare_command.empty(); }

 private:
  VmHost(uv_loop_t* loop, const config::Config& config, SystemdUnits* units)
      : loop_(loop), config_(config), units_(units), retirement_(loop) {}
  // Set-up in steps; each returns why windows jobs cannot run here, or nullopt.
  void setup(const std::string& init_path);
  std::optional<std::string> check_files_and_accounts(const std::string& init_path);
  std::optional<std::string> connect_libvirt();
  std::optional<std::string> choose_accelerator();
  void recover_leftovers();

  uv_loop_t* loop_;
  config::Config config_;
  SystemdUnits* units_;
  sandbox::CgroupReaper retirement_;  // pids cgroups of an earlier runner's VMs that were still busy
  std::optional<std::string> unavailable_;
  bool emulated_ = false;
  sandbox::Account qemu_account_;
  sandbox::Account prep_account_;  // motor-prep, when vm_prepare_command is set
  std::string helper_path_, init_path_;
  virConnectPtr conn_ = nullptr;
  int lifecycle_callback_ = -1;
  std::map<std::string, std::unique_ptr<vm::HelperCall>> recovery_;
};

}  // namespace motor::runner
