// The job's privileges: none. Root-side (before the uid switch, which needs CAP_SETUID and,
// for the bounding set, CAP_SETPCAP): lock the securebits so root-ness cannot grant capabilities,
// and empty the bounding set. Job-side (after the switch): clear ambient, then effective,
// permitted and inheritable with capset, set no_new_privs, and verify all of it.
#pragma once

#include "motor/expected.hpp"

namespace motor::sandbox {

struct CapabilityPlan {
  int last_cap = -1;  // /proc/sys/kernel/cap_last_cap, read in the parent
};

Expected<CapabilityPlan> plan_capabilities();

// Child, as root: securebits (NOROOT, no setuid fix-up bypass, no keep-caps, no ambient raise,
// all locked) and PR_CAPBSET_DROP for every capability.
int drop_bounding_set(const CapabilityPlan& plan, const char*& stage);

// Child, as the job account: ambient cleared, capset to all-zero, no_new_privs, then a check
// that every set (and the bounding set) reads back empty.
int drop_all_capabilities(const CapabilityPlan& plan, const char*& stage);

}  // namespace motor::sandbox
