// The runner's egress namespace (issue 9): where every outbound job's veth ends, routed and
// NATed to the uplink namespace, with the policy ruleset (netpolicy.hpp) judging each packet a
// job sends before anything else does. Jobs cannot touch it: it is not their namespace.
//
//   job netns            egress netns "motor-eg-<tag>"          uplink netns (the host's, or
//   eth0 <-veth-> mjv<slot>  ... nft policy ... up0 <-veth-> meg-<tag>  a named one) -> internet
//
// Set up at runner start (blocking child processes of `ip` and `nft`; start-up only, before the
// loop serves anyone), after removing whatever an earlier runner with the same tag left. Per
// job there is nothing to set up here: the job's child builds its pair (job_network.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "netpolicy/netpolicy.hpp"

namespace motor::netpolicy {

struct EgressConfig {
  std::string tag;            // short [0-9a-f] tag making names unique per runner (state dir)
  std::string uplink_netns;   // a name under /run/netns; empty = the runner's own namespace
  Cidr subnet;                // jobs' /30s; slot 0 is the egress <-> uplink link
  std::vector<Cidr> test_allowed;
};

class Egress {
 public:
  static Expected<std::unique_ptr<Egress>> create(const EgressConfig& config);
  // Removes the namespace, the uplink veth and the uplink table (what remove_leftovers removes).
  ~Egress();
  Egress(const Egress&) = delete;
  Egress& operator=(const Egress&) = delete;

  // Whatever a runner with this tag left (it was killed): best effort, errors ignored.
  static void remove_leftovers(const std::string& tag, const std::string& uplink_netns);

  int netns_fd() const { return netns_.get(); }
  // -1 when the uplink is the runner's own namespace.
  int uplink_netns_fd() const { return uplink_.get(); }
  const EgressPolicy& policy() const { return policy_; }
  const Cidr& subnet() const { return config_.subnet; }
  const std::string& netns_name() const { return name_; }
  const std::string& ruleset() const { return ruleset_; }

 private:
  Egress() = default;
  EgressConfig config_;
  std::string name_;
  EgressPolicy policy_;
  std::string ruleset_;
  UniqueFd netns_, uplink_;
};

// The uplink namespace's end of the veth to the egress namespace of the runner tagged `tag`:
// every packet an outbound job sends arrives in the uplink on it.
std::string uplink_veth(const std::string& tag);

// Every IPv4 address of a network namespace (`netns_fd`, or -1 for the caller's) and every
// gateway its routes name, from `ip -4 -j` (blocking: start-up and the gate only).
Expected<std::vector<Ipv4>> namespace_addresses(int netns_fd);

// A socket (AF_INET, `type`) of the network namespace `netns_fd` (-1: the caller's): a socket
// belongs to the namespace it was made in, so the thread enters it for the call and comes back.
// Failing to come back aborts: running on in a foreign namespace would be worse.
Expected<UniqueFd> socket_in_netns(int netns_fd, int type);

// Runs a program to completion (start-up and tests only: it blocks), optionally inside the
// network namespace `netns_fd`, feeding `input` on stdin. Fails with the program's stderr.
Status run_tool(const std::vector<std::string>& argv, int netns_fd = -1, const std::string& input = "",
                std::string* out = nullptr);

}  // namespace motor::netpolicy
