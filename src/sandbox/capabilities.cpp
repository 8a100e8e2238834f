#include "sandbox/capabilities.hpp"

#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "motor/test_switches.hpp"

namespace motor::sandbox {

Expected<CapabilityPlan> plan_capabilities() {
  std::ifstream in("/proc/sys/kernel/cap_last_cap");
  int last = -1;
  if (!(in >> last) || last < CAP_SETPCAP || last > 63)
    return make_error("sandbox", "capabilities: cannot read /proc/sys/kernel/cap_last_cap");
  CapabilityPlan plan;
  plan.last_cap = last;
  return plan;
}

int drop_bounding_set(const CapabilityPlan& plan, const char*& stage) {
  if (control_weakened("capabilities")) return 0;  // test build only: securebits unset, bounding set full
  // SECBIT_KEEP_CAPS off and locked: the uid switch clears permitted/effective/ambient.
  // SECBIT_NO_SETUID_FIXUP off and locked: that clearing cannot be turned off.
  // SECBIT_NOROOT on and locked: uid 0 (a setuid-root binary) gains no capabilities at exec.
  // SECBIT_NO_CAP_AMBIENT_RAISE on and locked.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                             SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                             SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) {
    stage = "capabilities: PR_SET_SECUREBITS";
    return errno;
  }
  for (int cap = 0; cap <= plan.last_cap; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      stage = "capabilities: PR_CAPBSET_DROP";
      return errno;
    }
  }
  return 0;
}

// Test build only: a weakened no_new_privs is neither set nor checked.
int set_no_new_privs(const char*& stage) {
  if (control_weakened("no-new-privs")) return 0;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    stage = "capabilities: PR_SET_NO_NEW_PRIVS";
    return errno;
  }
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    stage = "capabilities: no_new_privs did not stick";
    return EPERM;
  }
  return 0;
}

int drop_all_capabilities(const CapabilityPlan& plan, const char*& stage) {
  // Test build only: the sets are left as the uid switch left them (the bounding set full).
  if (control_weakened("capabilities")) return set_no_new_privs(stage);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    stage = "capabilities: clear ambient set";
    return errno;
  }
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capset, &header, data) != 0) {
    stage = "capabilities: capset to empty";
    return errno;
  }
  if (int err = set_no_new_privs(stage); err != 0) return err;

  // Verify: a flag is not evidence, and this is cheap.
  __user_cap_data_struct check[_LINUX_CAPABILITY_U32S_3] = {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  if (syscall(SYS_capget, &header, check) != 0) {
    stage = "capabilities: capget";
    return errno;
  }
  for (const auto& word : check) {
    if (word.effective != 0 || word.permitted != 0 || word.inheritable != 0) {
      stage = "capabilities: a capability set is not empty after capset";
      return EPERM;
    }
  }
  for (int cap = 0; cap <= plan.last_cap; ++cap) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0) {
      stage = "capabilities: bounding set is not empty";
      return EPERM;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) != 0) {
      stage = "capabilities: ambient set is not empty";
      return EPERM;
    }
  }
  return 0;
}

}  // namespace motor::sandbox
