#include "runner/unit_properties.hpp"

#include <signal.h>
#include <sys/mount.h>

#include "motor/test_switches.hpp"
#include "runner/systemd_units.hpp"

namespace motor::runner::unit_property {

int s(sd_bus_message* m, const char* name, const char* value) { return sd_bus_message_append(m, "(sv)", name, "s", value); }
int t(sd_bus_message* m, const char* name, uint64_t value) { return sd_bus_message_append(m, "(sv)", name, "t", value); }
int b(sd_bus_message* m, const char* name, bool value) { return sd_bus_message_append(m, "(sv)", name, "b", value ? 1 : 0); }
int i(sd_bus_message* m, const char* name, int value) { return sd_bus_message_append(m, "(sv)", name, "i", value); }
int h(sd_bus_message* m, const char* name, int fd) { return sd_bus_message_append(m, "(sv)", name, "h", fd); }

namespace {

// Opens (sv) with NAME and a variant of `type`; close with close_variant.
int open_variant(sd_bus_message* m, const char* name, const char* type) {
  int r = sd_bus_message_open_container(m, 'r', "sv");
  if (r >= 0) r = sd_bus_message_append(m, "s", name);
  if (r >= 0) r = sd_bus_message_open_container(m, 'v', type);
  return r;
}

int close_variant(sd_bus_message* m) {
  int r = sd_bus_message_close_container(m);
  if (r >= 0) r = sd_bus_message_close_container(m);
  return r;
}

std::vector<char*> c_strings(const std::vector<std::string>& values) {
  std::vector<char*> out;
  for (const auto& v : values) out.push_back(const_cast<char*>(v.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

int strings(sd_bus_message* m, const char* name, const std::vector<std::string>& values) {
  auto list = c_strings(values);
  int r = open_variant(m, name, "as");
  if (r >= 0) r = sd_bus_message_append_strv(m, list.data());
  if (r >= 0) r = close_variant(m);
  return r;
}

int cpus(sd_bus_message* m, const char* name, const std::vector<int>& cpus) {
  std::vector<uint8_t> mask;
  for (int cpu : cpus) {
    if (cpu < 0) continue;
    const size_t byte = static_cast<size_t>(cpu) / 8;
    if (mask.size() <= byte) mask.resize(byte + 1, 0);
    mask[byte] = static_cast<uint8_t>(mask[byte] | (1u << (cpu % 8)));
  }
  int r = open_variant(m, name, "ay");
  if (r >= 0) r = sd_bus_message_append_array(m, 'y', mask.data(), mask.size());
  if (r >= 0) r = close_variant(m);
  return r;
}

int exec_start(sd_bus_message* m, const std::vector<std::string>& argv) {
  if (argv.empty()) return -22;  // -EINVAL
  auto list = c_strings(argv);
  int r = open_variant(m, "ExecStart", "a(sasb)");
  if (r >= 0) r = sd_bus_message_open_container(m, 'a', "(sasb)");
  if (r >= 0) r = sd_bus_message_open_container(m, 'r', "sasb");
  if (r >= 0) r = sd_bus_message_append(m, "s", argv[0].c_str());
  if (r >= 0) r = sd_bus_message_append_strv(m, list.data());
  if (r >= 0) r = sd_bus_message_append(m, "b", 0);
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = close_variant(m);
  return r;
}

int binds(sd_bus_message* m, const char* name, const std::vector<std::string>& paths) {
  int r = open_variant(m, name, "a(ssbt)");
  if (r >= 0) r = sd_bus_message_open_container(m, 'a', "(ssbt)");
  for (const auto& path : paths) {
    if (r >= 0) r = sd_bus_message_append(m, "(ssbt)", path.c_str(), path.c_str(), 0, static_cast<uint64_t>(MS_REC));
  }
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = close_variant(m);
  return r;
}

int devices(sd_bus_message* m, const std::vector<std::pair<std::string, std::string>>& allowed) {
  int r = open_variant(m, "DeviceAllow", "a(ss)");
  if (r >= 0) r = sd_bus_message_open_container(m, 'a', "(ss)");
  for (const auto& [node, access] : allowed) {
    if (r >= 0) r = sd_bus_message_append(m, "(ss)", node.c_str(), access.c_str());
  }
  if (r >= 0) r = sd_bus_message_close_container(m);
  if (r >= 0) r = close_variant(m);
  return r;
}

int service_basics(sd_bus_message* m, const ServiceBasics& basics) {
  int r = s(m, "Description", basics.description.c_str());
  if (r >= 0) r = s(m, "Slice", kJobSlice);
  if (r >= 0) r = s(m, "Type", "exec");
  // Test build only (include/motor/test_switches.hpp): a weakened limit is left unset.
  if (r >= 0 && basics.memory_bytes > 0 && !control_weakened("memory-limit")) {
    r = t(m, "MemoryMax", static_cast<uint64_t>(basics.memory_bytes));
    if (r >= 0) r = t(m, "MemorySwapMax", 0);
  }
  if (r >= 0 && basics.pids_max > 0 && !control_weakened("pids-limit")) {
    r = t(m, "TasksMax", static_cast<uint64_t>(basics.pids_max));
  }
  if (r >= 0 && !basics.cpus.empty() && !control_weakened("cpuset")) {
    r = cpus(m, "AllowedCPUs", basics.cpus);
    // systemd 252 has no v1 cpuset: where cpuset is a v1 hierarchy only the affinity pins.
    if (r >= 0) r = cpus(m, "CPUAffinity", basics.cpus);
  }
  if (r >= 0) r = s(m, "User", basics.user.c_str());
  if (r >= 0) r = b(m, "NoNewPrivileges", true);
  if (r >= 0) r = t(m, "CapabilityBoundingSet", 0);
  if (r >= 0) r = s(m, "KillMode", "control-group");
  if (r >= 0) r = i(m, "KillSignal", SIGKILL);
  if (r >= 0) r = b(m, "SendSIGHUP", false);
  if (r >= 0) r = b(m, "IgnoreSIGPIPE", false);
  if (r >= 0) r = s(m, "OOMPolicy", "continue");
  if (r >= 0) r = s(m, "CollectMode", "inactive-or-failed");
  return r;
}

}  // namespace motor::runner::unit_property
