#include "vm/accelerator.hpp"

namespace motor::vm {

std::optional<Accelerator> parse_accelerator(std::string_view text) {
  if (text == "auto") return Accelerator::kAuto;
  if (text == "kvm") return Accelerator::kKvm;
  if (text == "tcg") return Accelerator::kTcg;
  return std::nullopt;
}

const char* accelerator_name(Accelerator a) {
  switch (a) {
    case Accelerator::kAuto: return "auto";
    case Accelerator::kKvm: return "kvm";
    case Accelerator::kTcg: return "tcg";
  }
  return "auto";
}

AcceleratorChoice choose_accelerator(Accelerator wanted, bool allow_emulation,
                                     const std::optional<std::string>& kvm_unusable) {
  AcceleratorChoice c;
  if (wanted == Accelerator::kTcg) {
    c.emulated = true;
    if (!allow_emulation) c.refused = "vm_accelerator = tcg but emulation is refused: set allow_emulation = true";
    return c;
  }
  if (!kvm_unusable) return c;
  if (wanted == Accelerator::kKvm) {
    c.refused = "vm_accelerator = kvm but KVM cannot be used here: " + *kvm_unusable;
    return c;
  }
  c.emulated = true;
  if (!allow_emulation) {
    c.refused = "KVM cannot be used here (" + *kvm_unusable +
                ") and emulation is refused: set allow_emulation = true to run VM jobs under TCG";
  }
  return c;
}

}  // namespace motor::vm
