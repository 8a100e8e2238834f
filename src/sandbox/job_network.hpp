// An outbound job's network (issue 9), built by the job's own child before exec: a veth pair
// from the job's fresh network namespace to the runner's egress namespace, addresses on both
// ends, a default route via the egress end, and no IPv6 at all.
//
// The child does it (as root, before pivot_root and the credential switch) so nothing of it
// runs on the runner's loop; the pair dies with the job's namespace, so a job's network
// cannot outlive the job. Everything is prepared in the parent: the child makes system calls.
#pragma once

#include <net/if.h>

#include <cstdint>
#include <vector>

#include "motor/expected.hpp"
#include "base/ipv4.hpp"

namespace motor::sandbox {

struct JobNetworkPlan {
  int egress_netns_fd = -1;       // the runner's egress namespace (kept open by the runner)
  char job_ifname[IFNAMSIZ] = {};     // "eth0", in the job's namespace
  char egress_ifname[IFNAMSIZ] = {};  // "mjv<slot>", in the egress namespace
  Ipv4 job_address = 0;
  Ipv4 gateway = 0;               // the egress end: the job's route out and its resolver
  int prefix = 30;
  std::vector<uint8_t> newlink;   // the RTM_NEWLINK request creating the pair
  bool operator==(const JobNetworkPlan&) const = default;
};

// `slot` >= 1 picks the job's /30 within `subnet` (slot 0 is the uplink link).
Expected<JobNetworkPlan> plan_job_network(int egress_netns_fd, const Cidr& subnet, uint32_t slot);
// Points `plan` at the egress namespace through `egress_netns_fd` (the RTM_NEWLINK names it by
// fd number, so a process that received the fd under another number calls this).
void use_egress_namespace(JobNetworkPlan& plan, int egress_netns_fd);
// Slot n's addresses: base + 4n + 1 (gateway), + 2 (job).
Ipv4 slot_gateway(const Cidr& subnet, uint32_t slot);
Ipv4 slot_job_address(const Cidr& subnet, uint32_t slot);
uint32_t slot_count(const Cidr& subnet);

// Child, as root, in the job's new network namespace: disables IPv6, creates the pair, sets up
// the egress end (entering the egress namespace and coming back), then the job's end and route.
int attach_job_network(const JobNetworkPlan& plan, const char*& stage);

}  // namespace motor::sandbox
