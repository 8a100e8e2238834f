// What of the runner's config the outbound network needs; config/config.hpp makes it, so this
// library does not depend on the config.
#pragma once

#include <string>
#include <vector>

namespace motor::netpolicy {

struct OutboundSettings {
  std::string state_dir;                 // names the egress namespace (egress_tag)
  std::string uplink_netns;              // empty: the runner's own namespace
  std::string subnet;                    // the jobs' /30 slots lie here
  std::vector<std::string> resolvers;    // empty: /etc/resolv.conf's nameservers
};

}  // namespace motor::netpolicy
