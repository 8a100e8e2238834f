// QEMU's command line for one VM job when Motor starts QEMU itself, in a transient systemd unit
// (job_backend = systemd; not landed yet), rather than through libvirt. Pure, unit-tested.
// The same machine as domain_xml.hpp describes:
//  - started paused (-S): the guest runs no instruction until the runner has checked QEMU's
//    confinement and sends `cont` on the QMP socket;
//  - no default device (-nodefaults), no network device, no display, no user config; a guest
//    reboot, power-off or crash ends QEMU (-no-reboot, panic: shutdown);
//  - QEMU's own seccomp filter (-sandbox) denies obsolete calls, privilege changes, spawning and
//    resource control, as libvirt's default does;
//  - disks in the order the guest expects (vda the overlay over the sealed image, its backing
//    chain spelled out so QEMU probes nothing; vdb the data disk; vdc the read-only transfer disk);
//  - the guest agent on virtio-serial port org.qemu.guest_agent.0, a Unix socket QEMU binds.
#pragma once

#include <string>
#include <vector>

#include "vm/domain_xml.hpp"

namespace motor::vm {

// `qmp_socket`: the Unix socket QEMU binds for its monitor (QMP), for the runner's `cont`.
std::vector<std::string> qemu_argv(const DomainSpec& spec, const std::string& qmp_socket);

// A QEMU option value with commas doubled, as QEMU's option parser reads them (a path with a
// comma would otherwise end the value).
std::string qemu_option_value(const std::string& text);

}  // namespace motor::vm
