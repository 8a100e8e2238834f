// The config keys of VM jobs (docs/windows-jobs.md); the format of each entry: config_keys.cpp.
#include "config/config_keys.hpp"

namespace motor::config::config_detail {
namespace {

const KeySpec kVmKeys[] = {
    {"vm_image", "Windows jobs (VMs through libvirt; docs/windows-jobs.md)", "path", Reload::kRestart, false,
     "The sealed qcow2 image every VM job boots from, through an overlay of its own; never "
     "written.\nEmpty: platform \"windows\" jobs are refused (platform_unsupported).",
     "The sealed qcow2 image every VM job boots through an overlay of its own. Absolute "
     "path; never written (keep it root-owned, mode 0444). Empty: windows jobs are refused "
     "(`platform_unsupported`).",
     [](Config& c, Value& v) { return set_optional_absolute(v.scalar, c.vm_image); },
     [](const Config& c) -> std::string { return show_scalar(c.vm_image); }},
    {"vm_kernel", "", "path", Reload::kRestart, false,
     "Direct kernel boot instead of the image's boot loader (the Linux test guest); empty "
     "for Windows.",
     "Direct kernel boot instead of the image's boot loader: for the Linux test guest "
     "(`scripts/build-test-guest`); empty for Windows. Absolute path or empty.",
     [](Config& c, Value& v) { return set_optional_absolute(v.scalar, c.vm_kernel); },
     [](const Config& c) -> std::string { return show_scalar(c.vm_kernel); }},
    {"vm_initrd", "", "path", Reload::kRestart, false,
     "",
     "The initrd for `vm_kernel`. Absolute path or empty.",
     [](Config& c, Value& v) { return set_optional_absolute(v.scalar, c.vm_initrd); },
     [](const Config& c) -> std::string { return show_scalar(c.vm_initrd); }},
    {"vm_kernel_cmdline", "", "text", Reload::kRestart, false,
     "",
     "The kernel command line for `vm_kernel`.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       c.vm_kernel_cmdline = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.vm_kernel_cmdline); }},
    {"libvirt_uri", "", "text", Reload::kRestart, false,
     "The libvirt connection (its event loop runs on the runner's loop).",
     "The libvirt connection. Its events and keepalives run on the runner's loop; blocking "
     "calls (create, resume, destroy) run in `motor-vm-helper` child processes.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar.find("://") == std::string::npos) return "expected a libvirt URI such as qemu:///system, got " + shown(v.scalar);
       c.libvirt_uri = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.libvirt_uri); }},
    {"allow_emulation", "", "boolean", Reload::kRestart, false,
     "QEMU without KVM (TCG, software emulation) is refused unless this is true.",
     "Whether VM jobs may run under TCG (software emulation; slow; for tests) at all. "
     "`false`: without usable KVM they are refused.",
     [](Config& c, Value& v) { return to_bool(v.scalar, c.allow_emulation); },
     [](const Config& c) -> std::string { return c.allow_emulation ? "true" : "false"; }},
    {"vm_accelerator", "", "word", Reload::kRestart, false,
     "auto: KVM when motor-qemu can open /dev/kvm and run a test guest on it and this "
     "host's KVM can\nboot a stock kernel (checked at start), else TCG if allow_emulation = "
     "true, else VM jobs are\nrefused. kvm: KVM or refuse. tcg: always TCG (needs "
     "allow_emulation = true).",
     "`auto`: KVM when the start-up probe as `motor-qemu` says it works (`/dev/kvm` opens "
     "for `motor-qemu` and runs a tiny real-mode guest; the CPU has `vmx`/`svm`; not the "
     "PVM variant), else TCG if `allow_emulation = true`, else VM jobs are refused with the "
     "probe's reason. `kvm`: KVM or refuse, never TCG. `tcg`: always TCG, no probe; "
     "requires `allow_emulation = true` (otherwise the config is rejected). "
     "docs/windows-jobs.md \"KVM or emulation\".",
     [](Config& c, Value& v) -> std::optional<std::string> {
       auto a = vm::parse_accelerator(v.scalar);
       if (!a) return "expected auto, kvm or tcg, got " + shown(v.scalar);
       c.vm_accelerator = *a;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return vm::accelerator_name(c.vm_accelerator); }},
    {"vm_dir", "", "path", Reload::kRestart, false,
     "Per-job overlays and agent sockets, and per-workspace persistent data disks. Every "
     "directory\nabove them must be searchable by motor-qemu.",
     "Per-job work directories (overlay, transfer disk, agent socket, domain XML), deleted "
     "when the job ends. Every directory above it must be searchable by `motor-qemu`.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, false)) return err;
       c.vm_dir = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.vm_dir); }},
    {"vm_data_dir", "", "path", Reload::kRestart, false,
     "",
     "Per-workspace persistent data disks (`CALLER/KEY.img`, raw, sparse, owned by "
     "`motor-qemu`).",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (auto err = check_absolute_dir(v.scalar, false)) return err;
       c.vm_data_dir = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.vm_data_dir); }},
    {"vm_data_disk_size", "", "size", Reload::kRestart, false,
     "Size of a new data disk (sparse), and memory QEMU may use beyond the guest's RAM.",
     "Size of a new data disk (16M to 16T).",
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{16} << 20, int64_t{1} << 44, c.vm_data_disk_bytes); },
     [](const Config& c) -> std::string { return size_name(c.vm_data_disk_bytes); }},
    {"vm_memory_overhead", "", "size", Reload::kRestart, false,
     "",
     "Memory QEMU may use beyond the guest's RAM: the hard limit of its memory cgroup is "
     "`memory` + this, and admission reserves the same.",
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{64} << 20, int64_t{1} << 40, c.vm_memory_overhead_bytes); },
     [](const Config& c) -> std::string { return size_name(c.vm_memory_overhead_bytes); }},
    {"vm_guest_runner", "", "text", Reload::kRestart, false,
     "What the guest agent runs: RUNNER STDOUT_FILE STDERR_FILE CHANGES_FILE CWD COMMAND... "
     "in the guest.",
     "What the guest agent executes: `RUNNER STDOUT_FILE STDERR_FILE CHANGES_FILE CWD "
     "COMMAND...` inside the guest (docs/windows-jobs.md \"The guest runner\").",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar.empty()) return "expected the guest-side runner's path";
       c.vm_guest_runner = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.vm_guest_runner); }},
    {"vm_agent_timeout_s", "", "seconds", Reload::kRestart, false,
     "How long the guest agent may take to answer after the VM starts (seconds).",
     "How long the guest agent may take to answer after the VM is resumed (1 to 3600).",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 3600, c.vm_agent_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.vm_agent_timeout_s); }},
    {"vm_output_max_size", "", "size", Reload::kRestart, false,
     "Most output read from one VM job; the rest is dropped with a note on stderr.",
     "Most output read from one VM job; after it reading stops with a note on stderr.",
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{64} << 10, int64_t{1} << 40, c.vm_output_max_bytes); },
     [](const Config& c) -> std::string { return size_name(c.vm_output_max_bytes); }},
    {"vm_prepare_command", "", "text", Reload::kRestart, false,
     "Dependency preparation before every VM job boots: this shell command (run with "
     "/bin/sh -c) runs\nin a Linux sandbox as motor-prep, the workspace read-only at "
     "/workspace, network as outbound\njobs get it when outbound_network is on (else "
     "loopback only), and writes what the guest needs\ninto $MOTOR_PREP_OUT; that directory "
     "goes onto the transfer disk as .motor-prep/. \"\": none.",
     "Dependency preparation before every VM job boots (docs/windows-jobs.md \"Dependency "
     "preparation\"): a shell command (`/bin/sh -c`, at most 4096 bytes) run in a Linux "
     "sandbox as `motor-prep`, with the workspace read-only at `/workspace` and an empty "
     "writable `$MOTOR_PREP_OUT`; what it writes there goes onto the transfer disk as "
     "`.motor-prep/`. Network: the outbound jobs' filtered egress when `outbound_network = "
     "true`, loopback only otherwise. Its failure refuses the VM job (`vm_start_failed`) "
     "before any VM starts. `\"\"`: no preparation.",
     [](Config& c, Value& v) -> std::optional<std::string> {
       if (v.scalar.size() > 4096) return "a prepare command is at most 4096 bytes";
       c.vm_prepare_command = v.scalar;
       return std::nullopt;
     },
     [](const Config& c) -> std::string { return show_scalar(c.vm_prepare_command); }},
    {"vm_prepare_timeout_s", "", "seconds", Reload::kRestart, false,
     "How long the preparation may run (seconds), and the most it may write into "
     "$MOTOR_PREP_OUT.",
     "How long the preparation may run (1 to 86400 seconds); past it the preparation is "
     "killed and the job refused. The job's own `timeout` runs from `started`, after it.",
     [](Config& c, Value& v) { return to_whole(v.scalar, kSeconds, 1, 86400, c.vm_prepare_timeout_s); },
     [](const Config& c) -> std::string { return std::to_string(c.vm_prepare_timeout_s); }},
    {"vm_prepare_max_size", "", "size", Reload::kRestart, false,
     "",
     "The most the preparation may write into `$MOTOR_PREP_OUT` (1M to 64G): a tmpfs of "
     "this size; a full one fails the write with `ENOSPC`. The transfer disk (1 GiB) must "
     "hold the workspace and this result.",
     [](Config& c, Value& v) { return to_size(v.scalar, int64_t{1} << 20, int64_t{64} << 30, c.vm_prepare_max_bytes); },
     [](const Config& c) -> std::string { return size_name(c.vm_prepare_max_bytes); }},
};

}  // namespace

std::span<const KeySpec> vm_config_keys() { return kVmKeys; }

}  // namespace motor::config::config_detail
