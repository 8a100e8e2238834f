#include "runner/systemd_units.hpp"

#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "base/log.hpp"

namespace motor::runner {
namespace {

constexpr const char* kSystemd = "org.freedesktop.systemd1";
constexpr const char* kManagerPath = "/org/freedesktop/systemd1";
constexpr const char* kManager = "org.freedesktop.systemd1.Manager";
constexpr uint64_t kStartupCallTimeoutUs = 2 * 1000 * 1000;
constexpr auto kLeftoverWait = std::chrono::seconds(10);

struct BusRef {
  sd_bus* bus = nullptr;
  ~BusRef() { sd_bus_flush_close_unref(bus); }
};
struct MessageRef {
  sd_bus_message* m = nullptr;
  ~MessageRef() { sd_bus_message_unref(m); }
};
struct ErrorRef {
  sd_bus_error e = SD_BUS_ERROR_NULL;
  ~ErrorRef() { sd_bus_error_free(&e); }
};

// A start-up connection (blocking calls, before the runner listens).
Expected<BusRef*> startup_bus(BusRef& ref) {
  if (int r = sd_bus_open_system(&ref.bus); r < 0) return reactor::sd_bus_failure("connecting to the system bus", r);
  if (int r = sd_bus_set_method_call_timeout(ref.bus, kStartupCallTimeoutUs); r < 0) {
    return reactor::sd_bus_failure("sd_bus_set_method_call_timeout", r);
  }
  return &ref;
}

Expected<std::string> systemd_version(sd_bus* bus) {
  ErrorRef error;
  char* version = nullptr;
  if (int r = sd_bus_get_property_string(bus, kSystemd, kManagerPath, kManager, "Version", &error.e, &version); r < 0) {
    return reactor::sd_bus_failure("asking systemd for its version", r, &error.e);
  }
  std::string v = version ? version : "";
  free(version);
  return v;
}

Expected<std::vector<std::string>> list_job_units(sd_bus* bus) {
  ErrorRef error;
  MessageRef reply;
  const char* patterns[] = {kJobUnitPattern, nullptr};
  MessageRef call;
  if (int r = sd_bus_message_new_method_call(bus, &call.m, kSystemd, kManagerPath, kManager, "ListUnitsByPatterns");
      r < 0) {
    return reactor::sd_bus_failure("ListUnitsByPatterns", r);
  }
  if (int r = sd_bus_message_append_strv(call.m, nullptr); r < 0) return reactor::sd_bus_failure("ListUnitsByPatterns", r);
  if (int r = sd_bus_message_append_strv(call.m, const_cast<char**>(patterns)); r < 0) {
    return reactor::sd_bus_failure("ListUnitsByPatterns", r);
  }
  if (int r = sd_bus_call(bus, call.m, 0, &error.e, &reply.m); r < 0) {
    return reactor::sd_bus_failure("listing the job units", r, &error.e);
  }
  std::vector<std::string> names;
  if (int r = sd_bus_message_enter_container(reply.m, SD_BUS_TYPE_ARRAY, "(ssssssouso)"); r < 0) {
    return reactor::sd_bus_failure("reading the job units", r);
  }
  const char* name = nullptr;
  while (sd_bus_message_read(reply.m, "(ssssssouso)", &name, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                             nullptr, nullptr, nullptr) > 0) {
    names.emplace_back(name);
  }
  return names;
}

}  // namespace

std::string job_unit_name(const std::string& job_id) { return "motor-job-" + job_id + ".service"; }

Expected<bool> use_systemd_backend(config::JobBackend wanted) {
  if (wanted == config::JobBackend::kDirect) return false;
  if (wanted == config::JobBackend::kAuto && sd_booted() <= 0) {
    log_info("job_backend = auto: systemd is not PID 1 here; Linux jobs run in the runner's own cgroups");
    return false;
  }
  BusRef ref;
  auto bus = startup_bus(ref);
  auto version = bus ? systemd_version(ref.bus) : Expected<std::string>(bus.error());
  if (!version) {
    if (wanted == config::JobBackend::kSystemd) {
      return make_error("config", "job_backend = systemd, but systemd's bus does not answer: " + version.error().message);
    }
    log_warning("job_backend = auto: systemd's bus does not answer ({}); Linux jobs run in the runner's own cgroups",
                version.error().message);
    return false;
  }
  log_info("job_backend: Linux jobs run as transient units of systemd {} in {}", *version, kJobSlice);
  return true;
}

Expected<std::vector<std::string>> stop_leftover_job_units() {
  BusRef ref;
  if (auto bus = startup_bus(ref); !bus) return bus.error();
  auto units = list_job_units(ref.bus);
  if (!units) return units.error();
  std::vector<std::string> ids;
  for (const auto& unit : *units) {
    log_warning("stopping the job unit {} an earlier runner left", unit);
    ErrorRef kill_error, stop_error;
    (void)sd_bus_call_method(ref.bus, kSystemd, kManagerPath, kManager, "KillUnit", &kill_error.e, nullptr, "ssi",
                             unit.c_str(), "all", SIGKILL);
    if (int r = sd_bus_call_method(ref.bus, kSystemd, kManagerPath, kManager, "StopUnit", &stop_error.e, nullptr, "ss",
                                   unit.c_str(), "replace");
        r < 0) {
      log_warning("stopping {}: {}", unit, reactor::sd_bus_failure("StopUnit", r, &stop_error.e).message);
    }
    constexpr std::string_view prefix = "motor-job-", suffix = ".service";
    ids.push_back(unit.substr(prefix.size(), unit.size() - prefix.size() - suffix.size()));
  }
  // Gone: systemd unloads a stopped transient unit once its cgroup is empty.
  const auto deadline = std::chrono::steady_clock::now() + kLeftoverWait;
  for (;;) {
    auto left = list_job_units(ref.bus);
    if (!left) return left.error();
    if (left->empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      log_warning("{} job unit(s) of an earlier runner are still loaded after {} s (first: {})", left->size(),
                  kLeftoverWait.count(), left->front());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // start-up, before the runner listens
  }
  return ids;
}

Expected<std::unique_ptr<SystemdUnits>> SystemdUnits::open(uv_loop_t* loop, std::string entry_path) {
  if (access(entry_path.c_str(), X_OK) != 0) {
    return make_error("config", "motor-unit-entry is not at " + entry_path + " (it is built beside motor-runner)");
  }
  auto bus = reactor::SdBusLoop::open_system(loop);
  if (!bus) return bus.error();
  (*bus)->on_broken([](const std::string& why) {
    log_error("the connection to systemd's bus broke ({}); job units can no longer be started or watched", why);
  });
  if (int r = sd_bus_call_method_async((*bus)->bus(), nullptr, kSystemd, kManagerPath, kManager, "Subscribe",
                                       [](sd_bus_message* m, void*, sd_bus_error*) -> int {
                                         if (sd_bus_message_is_method_error(m, nullptr)) {
                                           log_error("systemd refused Subscribe: {}",
                                                     sd_bus_message_get_error(m)->message);
                                         }
                                         return 0;
                                       },
                                       nullptr, "");
      r < 0) {
    return reactor::sd_bus_failure("subscribing to systemd's signals", r);
  }
  return std::unique_ptr<SystemdUnits>(new SystemdUnits(std::move(*bus), std::move(entry_path)));
}

}  // namespace motor::runner
