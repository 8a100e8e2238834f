// Where the outbound attacks' packets land if the egress policy lets them through: UDP listeners
// the gate makes, so GOT THROUGH means a datagram arrived, not only that a drop counter stood still.
// Never an outside address: either the uplink namespace's own addresses (the host), or a network
// namespace the gate makes and that only the gate runner's jobs reach: a policy-routing rule in
// the uplink sends what arrives from the runner's egress veth, for those addresses only, into it.
// Blocking (`ip` runs as a child to completion): the gate only, never the runner's loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::gate {

class ArrivalListeners {
 public:
  // Listeners on those of `addresses` that are the uplink namespace's own (`uplink_netns` by
  // name; empty: the gate's own namespace); the others (its gateways) get none.
  static Expected<std::unique_ptr<ArrivalListeners>> on_uplink(const std::string& uplink_netns,
                                                               const std::vector<std::string>& addresses);
  // A namespace of the gate's own ("motor-gc-<tag>", where `tag` is the gate runner's egress tag)
  // holding `addresses`, reached only from the egress veth of that runner (netpolicy::uplink_veth).
  static Expected<std::unique_ptr<ArrivalListeners>> behind_uplink(const std::string& uplink_netns, const std::string& tag,
                                                                   const std::vector<std::string>& addresses);
  ~ArrivalListeners();  // the rule, the routes, the veth and the namespace go
  ArrivalListeners(const ArrivalListeners&) = delete;
  ArrivalListeners& operator=(const ArrivalListeners&) = delete;

  // The UDP port every listener has (one free port of the first address, taken on the others).
  uint16_t port() const { return port_; }
  // The addresses at which a datagram has arrived so far (reads without waiting).
  std::vector<std::string> arrived();

 private:
  ArrivalListeners() = default;
  // `skip_foreign`: an address not of that namespace gets no listener (instead of an error).
  Status listen_on(int netns_fd, const std::vector<std::string>& addresses, bool skip_foreign);
  void remove_route_namespace();

  struct Listener {
    std::string address;
    UniqueFd fd;
    bool arrived;
  };
  std::vector<Listener> listeners_;
  uint16_t port_ = 0;
  std::string uplink_netns_, tag_;  // tag_ set: behind_uplink made a namespace and a rule
};

}  // namespace motor::gate
