#include "runner/qemu_unit.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "base/log.hpp"
#include "motor/sys_error.hpp"
#include "reactor/run_soon.hpp"
#include "runner/unit_properties.hpp"
#include "vm/qemu_command.hpp"

namespace motor::runner {
namespace {

// What systemd sets in a service's environment on its own (for User=, and its own bookkeeping):
// unset, so that QEMU starts with nothing (the confinement check refuses anything left).
const std::vector<std::string> kManagerEnvironment = {"PATH", "HOME", "LOGNAME", "USER", "SHELL", "INVOCATION_ID",
                                                      "SYSTEMD_EXEC_PID", "JOURNAL_STREAM", "LANG", "LANGUAGE",
                                                      "TERM", "MANAGERPID", "NOTIFY_SOCKET"};
// The host's top-level directories of programs and libraries: symlinks into /usr on a merged-/usr
// host (made the same in the unit's root), directories otherwise (bound read-only).
const char* const kProgramDirs[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
constexpr uint64_t kGonePollMs = 100;
// The start job's end is also asked for, not only awaited as JobRemoved: QEMU's start is seconds
// of a VM's boot, so a few look-ups cost nothing.
constexpr uint64_t kStartPollMs = 50;

}  // namespace

QemuUnit::QemuUnit(uv_loop_t* loop, SystemdUnits& units, QemuUnitSpec spec)
    : loop_(loop), units_(units), spec_(std::move(spec)), unit_(units.unit_name(spec_.job_id)), watch_(loop, units, unit_) {}

QemuUnit::~QemuUnit() {
  sd_bus_slot_unref(start_slot_);
}

const std::vector<std::string>& QemuUnit::environment_names() const {
  static const std::vector<std::string> none;
  return none;
}

Status QemuUnit::make_root() const {
  std::error_code ec;
  std::filesystem::remove_all(spec_.root_dir, ec);  // a leftover of a runner that died
  if (::mkdir(spec_.root_dir.c_str(), 0755) != 0) return sys_error("creating " + spec_.root_dir);
  for (const char* dir : kProgramDirs) {
    const std::string host = std::string("/") + dir;
    char target[256];
    const ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;  // a directory (bound in send_start) or absent
    if (::symlink(std::string(target, static_cast<size_t>(n)).c_str(), (spec_.root_dir + host).c_str()) != 0) {
      return sys_error("linking " + spec_.root_dir + host);
    }
  }
  return {};
}

Status QemuUnit::create(const vm::DomainSpec& domain, Answer done) {
  if (!units_.bus().connected()) return make_error("io", "the connection to systemd's bus is broken");
  if (auto s = make_root(); !s) return s;
  if (!watching_) {
    if (auto s = watch_.watch([this](const std::string& result) { on_start_job_ended(result); }, [this] { on_gone(); }); !s) {
      return s;
    }
    watching_ = true;
  }
  if (auto s = send_start(vm::qemu_argv(domain, spec_.work_dir + "/qmp.sock"), domain); !s) return s;
  create_done_ = std::move(done);
  return {};
}

Status QemuUnit::send_start(const std::vector<std::string>& argv, const vm::DomainSpec& domain) {
  namespace p = unit_property;
  const p::ServiceBasics basics{"motor VM job " + spec_.job_id + " of " + spec_.caller + " (QEMU)", spec_.qemu_user,
                                spec_.hard_limit_bytes, spec_.pids_max, spec_.cpus};
  // A root of its own: only what QEMU needs is in it.
  std::vector<std::string> read_only = {"/usr", domain.sealed_image};
  for (const std::string* file : {&domain.kernel, &domain.initrd}) {
    if (!file->empty()) read_only.push_back(*file);
  }
  for (const char* dir : kProgramDirs) {
    struct stat st {};
    const std::string host = std::string("/") + dir;
    if (::lstat(host.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) read_only.push_back(host);
  }
  std::vector<std::string> writable = {spec_.work_dir, domain.data_disk};
  if (spec_.kvm) writable.push_back("/dev/kvm");
  auto properties = [&](sd_bus_message* m) {
    int r = p::service_basics(m, basics);
    if (r >= 0) r = p::exec_start(m, argv);
    if (r >= 0) r = p::strings(m, "UnsetEnvironment", kManagerEnvironment);
    if (r >= 0) r = p::s(m, "RootDirectory", spec_.root_dir.c_str());
    if (r >= 0) r = p::b(m, "MountAPIVFS", true);
    if (r >= 0) r = p::binds(m, "BindReadOnlyPaths", read_only);
    if (r >= 0) r = p::binds(m, "BindPaths", writable);
    // A private /dev: the pseudo-devices only, and /dev/kvm when the job uses KVM.
    if (r >= 0) r = p::b(m, "PrivateDevices", true);
    if (r >= 0) r = p::s(m, "DevicePolicy", "closed");
    if (r >= 0 && spec_.kvm) r = p::devices(m, {{"/dev/kvm", "rw"}});
    if (r >= 0) r = p::b(m, "PrivateNetwork", true);
    if (r >= 0) r = p::b(m, "PrivateIPC", true);
    if (r >= 0) r = p::b(m, "ProtectHostname", true);
    if (r >= 0) r = p::s(m, "ProtectProc", "invisible");
    if (r >= 0) r = p::s(m, "ProcSubset", "pid");
    for (const char* on : {"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
                           "RestrictSUIDSGID", "LockPersonality", "RestrictRealtime"}) {
      if (r >= 0) r = p::b(m, on, true);
    }
    return r;
  };
  return units_.start_transient(unit_, properties, &start_slot_, [](sd_bus_message* reply, void* self, sd_bus_error*) -> int {
    static_cast<QemuUnit*>(self)->on_start_answer(reply);
    return 0;
  }, this);
}

void QemuUnit::on_start_answer(sd_bus_message* reply) {
  start_slot_ = sd_bus_slot_unref(start_slot_);
  if (!sd_bus_message_is_method_error(reply, nullptr)) return watch_.poll_until_started(kStartPollMs);
  const sd_bus_error* e = sd_bus_message_get_error(reply);
  created(make_error("vm", fmt::format("systemd did not start the unit {}: {}", unit_, e && e->message ? e->message : "no reason")));
}

void QemuUnit::on_start_job_ended(const std::string& result) {
  if (result != "done") {
    return created(make_error("vm", fmt::format("systemd's start job of {} ended \"{}\" (journalctl -u {})", unit_, result, unit_)));
  }
  ask_main_pid();
}

// Type=exec: the start job is done once QEMU was exec'd; the unit's main process is QEMU.
void QemuUnit::ask_main_pid() {
  watch_.main_pid([this](Expected<uint32_t> pid) {
    if (!pid) return created(make_error("vm", "QEMU is not running: " + pid.error().message));
    created(std::to_string(*pid));
  });
}

void QemuUnit::created(Expected<std::string> result) {
  if (!create_done_) return;
  Answer done = std::move(create_done_);
  create_done_ = nullptr;
  done(std::move(result));
}

Status QemuUnit::helper(std::vector<std::string> args, uint64_t timeout_ms, Answer done) {
  auto started = vm::HelperCall::start(loop_, spec_.helper_path, args, timeout_ms, std::move(done));
  if (!started) return started.error();
  calls_.push_back(std::move(*started));
  return {};
}

Status QemuUnit::resume(Answer done) { return helper({"qmp-cont", spec_.work_dir + "/qmp.sock"}, 30000, std::move(done)); }

Status QemuUnit::destroy(Answer done) {
  destroy_done_ = std::move(done);
  if (!watching_) {
    if (auto s = watch_.watch(nullptr, [this] { on_gone(); }); !s) return s;
    watching_ = true;
  }
  if (const int r = kill_and_stop_unit(units_.bus().bus(), unit_); r < 0) {
    return reactor::sd_bus_failure("killing the unit " + unit_, r);
  }
  units_.bus().update();
  watch_.poll_until_gone(kGonePollMs);
  if (watch_.gone()) {  // gone before the destroy: answered from the loop, not from inside this call
    return reactor::run_soon(loop_, [this] { on_gone(); });
  }
  return {};
}

void QemuUnit::on_gone() {
  if (!destroy_done_) return;  // QEMU ended on its own: the VM job sees its exit and destroys
  Answer done = std::move(destroy_done_);
  destroy_done_ = nullptr;
  // The unit is gone, so QEMU is: its files may go (a big unlink must not stall the loop).
  if (auto s = helper({"remove", spec_.work_dir, spec_.root_dir}, 120000, done); !s) done(s.error());
}

}  // namespace motor::runner
