// A VM job's QEMU as a transient systemd unit Motor starts itself (job_backend = systemd;
// docs/windows-jobs.md "QEMU as a systemd unit"), the vm::QemuLauncher the runner gives VM jobs
// there instead of libvirt. The unit (named as a job's unit, so a restart finds and stops it like
// one) runs qemu_argv() (vm/qemu_command.hpp) as motor-qemu with the job's MemoryMax (the
// hard limit), TasksMax and CPUs, NoNewPrivileges, an empty CapabilityBoundingSet, an empty
// environment, PrivateNetwork and PrivateIPC, and a root of its own that holds only what QEMU
// needs: /usr read-only, the sealed image, kernel and initrd read-only, the job's directory
// (overlay, transfer disk, agent and monitor sockets, console log) and its data disk read-write,
// a private /dev (PrivateDevices, DevicePolicy=closed) with /dev/kvm bound and allowed only when
// the job uses KVM, and /proc with only its own processes.
//
// create: StartTransientUnit, then (its start job done) the unit's MainPID is QEMU's pid.
// resume: motor-vm-helper qmp-cont on the monitor socket. destroy: KillUnit and StopUnit, and
// once the unit is gone, motor-vm-helper remove of the job's directory and the unit's root.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runner/systemd_units.hpp"
#include "runner/unit_watch.hpp"
#include "vm/helper_call.hpp"
#include "vm/qemu_launcher.hpp"

namespace motor::runner {

struct QemuUnitSpec {
  std::string job_id, caller;
  std::string helper_path;      // motor-vm-helper
  std::string work_dir;         // the job's directory, bound read-write
  std::string root_dir;         // the unit's RootDirectory: made by create, deleted by destroy
  std::string qemu_user;        // motor-qemu
  int64_t hard_limit_bytes = 0;
  int64_t pids_max = 0;
  std::vector<int> cpus;
  bool kvm = false;             // /dev/kvm bound into the unit and allowed
};

class QemuUnit final : public vm::QemuLauncher {
 public:
  QemuUnit(uv_loop_t* loop, SystemdUnits& units, QemuUnitSpec spec);
  ~QemuUnit() override;

  Status create(const vm::DomainSpec& domain, Answer done) override;
  Status resume(Answer done) override;
  Status destroy(Answer done) override;
  bool creating() const override { return static_cast<bool>(create_done_); }
  const std::vector<std::string>& environment_names() const override;
  bool limits_pids() const override { return true; }
  std::string describe() const override { return "systemd unit " + unit_; }

  // The unit's root directory for a job (beside its directory in vm_dir).
  static std::string root_dir_for(const std::string& work_dir) { return work_dir + ".root"; }

 private:
  Status make_root() const;
  Status send_start(const std::vector<std::string>& argv, const vm::DomainSpec& domain);
  void on_start_answer(sd_bus_message* reply);
  void on_start_job_ended(const std::string& result);
  void ask_main_pid();
  void created(Expected<std::string> result);
  void on_gone();
  Status helper(std::vector<std::string> args, uint64_t timeout_ms, Answer done);

  uv_loop_t* loop_;
  SystemdUnits& units_;
  QemuUnitSpec spec_;
  std::string unit_;
  UnitWatch watch_;
  bool watching_ = false;
  sd_bus_slot* start_slot_ = nullptr;
  Answer create_done_, destroy_done_;
  // Every helper call of the job, kept until the launcher goes (a call may be made from inside an
  // earlier one's answer, which must not destroy that one).
  std::vector<std::unique_ptr<vm::HelperCall>> calls_;
};

}  // namespace motor::runner
