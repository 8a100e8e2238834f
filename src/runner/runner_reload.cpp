// SIGHUP: the config is read again and the keys that may change while running are taken; the
// others keep their start-up values until a restart, and the log names them. Running jobs are
// never touched (a new default applies to jobs accepted afterwards).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/log.hpp"
#include "runner/runner.hpp"

namespace motor::runner {

void Runner::reload() {
  if (!config_source_) {
    log_warning("SIGHUP: no config file to read again (started with the embedded defaults); nothing changed");
    return;
  }
  auto next = config_source_();
  if (!next) {
    // A broken edit must not take the runner down: it keeps serving with what it has.
    log_error("SIGHUP: config not reloaded, every key keeps its value: {}", next.error().message);
    return;
  }
  const config::ReloadOutcome outcome = config::apply_reload(config_, *next);
  log_set_level(config_.log_level);
  if (outcome.applied.empty() && outcome.kept.empty()) {
    log_info("SIGHUP: config reloaded, no key changed");
    return;
  }
  if (!outcome.applied.empty()) {
    log_info("SIGHUP: config reloaded; now in effect: {}", fmt::join(outcome.applied, ", "));
    configure_sandbox_pool();  // sandboxes built ahead are built from the keys now in effect
  }
  if (!outcome.kept.empty()) {
    log_warning("SIGHUP: changed but kept until a restart (they cannot change while running): {}",
                fmt::join(outcome.kept, ", "));
  }
}

}  // namespace motor::runner
