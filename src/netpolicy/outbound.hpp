// Outbound network for jobs (issue 9), as the runner sees it: the egress namespace and its
// policy (src/netpolicy/egress.hpp), the filtering resolver (resolver.hpp), and the per-job /30
// slots. Exists only when the config enables outbound_network.
#pragma once

#include <uv.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "netpolicy/outbound_settings.hpp"
#include "netpolicy/resolver.hpp"
#include "netpolicy/egress.hpp"
#include "sandbox/job_network.hpp"

namespace motor::netpolicy {


class Outbound {
 public:
  // Start-up only (blocks on `ip`/`nft` child processes): builds the egress namespace after
  // removing what a killed runner with the same state directory left, and starts the resolver.
  static Expected<std::unique_ptr<Outbound>> start(uv_loop_t* loop, const OutboundSettings& config);
  // With outbound disabled: removes an egress namespace a killed runner left, if any.
  static void remove_leftovers(const OutboundSettings& config);

  // The job's network: a free /30 slot and the plan its child builds (job_network.hpp).
  Expected<sandbox::JobNetworkPlan> claim(const std::string& job_id);
  // Every slot is claimed: claim() would fail for want of one (the job is refused runner_full).
  bool full() const { return slots_.size() + 1 >= sandbox::slot_count(egress_->subnet()); }
  void release(const std::string& job_id);

  const netpolicy::Egress& egress() const { return *egress_; }

 private:
  std::unique_ptr<netpolicy::Egress> egress_;
  std::unique_ptr<Resolver> resolver_;  // declared after egress_: closed before it goes
  std::map<std::string, uint32_t> slots_;
  uint32_t next_slot_ = 1;
};

// The egress names' tag for a state directory: a runner and its restart share it, two runners
// on one host do not.
std::string egress_tag(const std::string& state_dir);

}  // namespace motor::netpolicy
