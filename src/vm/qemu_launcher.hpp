// Who starts, resumes and destroys a VM job's QEMU (vm_job.hpp). Two launchers:
//  - libvirt (libvirt_launcher.hpp), through motor-vm-helper: the domain XML, a paused create,
//    virDomainResume, virDomainDestroy (the direct backend's way);
//  - the host's systemd (job_backend = systemd): QEMU as a transient unit Motor starts itself,
//    confined by the unit; not landed yet (docs/job-isolation.md, the parity table's last row).
// Each call answers once, on the loop, unless the launcher is destroyed first (then never).
// Answers are never given from inside the call itself.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "vm/domain_xml.hpp"

namespace motor::vm {

class QemuLauncher {
 public:
  // Ok: the call's result (create: QEMU's pid as decimal text). Error: why it failed.
  using Answer = std::function<void(Expected<std::string>)>;
  virtual ~QemuLauncher() = default;

  // Starts QEMU for `domain`, paused: the guest runs no instruction before resume().
  virtual Status create(const DomainSpec& domain, Answer done) = 0;
  virtual Status resume(Answer done) = 0;
  // Ends QEMU (also when it is gone or was never started) and deletes the job's directory.
  virtual Status destroy(Answer done) = 0;
  // A create is waiting for its answer (a kill then waits for it, so that what it made is known).
  virtual bool creating() const = 0;

  // What the runner's check of QEMU's confinement (qemu_confinement.hpp) expects of it: the
  // environment variables the launcher lets through, and whether QEMU's pids limit is the
  // launcher's (a unit's TasksMax, checked) or the runner's to set (a pids cgroup of its own).
  virtual const std::vector<std::string>& environment_names() const = 0;
  virtual bool limits_pids() const = 0;
  // For the job's log: "libvirt domain NAME" or "systemd unit NAME".
  virtual std::string describe() const = 0;
};

}  // namespace motor::vm
