// Which accelerator QEMU gets for VM jobs: the config's vm_accelerator and allow_emulation,
// decided against what the KVM probe (vm/kvm_probe.hpp) found as the account QEMU runs as.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor::vm {

enum class Accelerator { kAuto, kKvm, kTcg };

std::optional<Accelerator> parse_accelerator(std::string_view text);
const char* accelerator_name(Accelerator a);

// What the runner decided: emulated (TCG) or KVM, or why VM jobs are refused (names the setting).
struct AcceleratorChoice {
  bool emulated = false;
  std::optional<std::string> refused;
};

// `kvm_unusable` is the probe's reason KVM cannot be used (nullopt: it can). auto takes KVM when
// it is usable, else TCG only if allow_emulation; kvm never falls back; tcg needs allow_emulation.
AcceleratorChoice choose_accelerator(Accelerator wanted, bool allow_emulation,
                                     const std::optional<std::string>& kvm_unusable);

}  // namespace motor::vm
