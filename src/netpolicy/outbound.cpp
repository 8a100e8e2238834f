#include "netpolicy/outbound.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "motor/test_switches.hpp"
#include "base/log.hpp"
#include "base/sha256.hpp"

namespace motor::netpolicy {

std::string egress_tag(const std::string& state_dir) { return to_hex(sha256(state_dir)).substr(0, 6); }

void Outbound::remove_leftovers(const OutboundSettings& config) {
  const std::string tag = egress_tag(config.state_dir);
  struct stat st {};
  if (stat(("/run/netns/motor-eg-" + tag).c_str(), &st) != 0) return;
  log_warning("removing the egress namespace motor-eg-{} an earlier runner left", tag);
  netpolicy::Egress::remove_leftovers(tag, config.uplink_netns);
}

Expected<std::unique_ptr<Outbound>> Outbound::start(uv_loop_t* loop, const OutboundSettings& config) {
  auto subnet = parse_cidr(config.subnet);
  if (!subnet) return subnet.error();
  netpolicy::EgressConfig ec;
  ec.tag = egress_tag(config.state_dir);
  ec.uplink_netns = config.uplink_netns;
  ec.subnet = *subnet;
  for (const auto& text : test_switches().allowed_destinations) {
    auto cidr = parse_cidr(text);
    if (!cidr) return make_error("config", "--test-allow-destination: " + cidr.error().message);
    ec.test_allowed.push_back(*cidr);
  }
  std::vector<Ipv4> upstreams;
  for (const auto& r : config.resolvers) upstreams.push_back(*parse_ipv4(r));
  if (upstreams.empty()) {
    std::ifstream in("/etc/resolv.conf");
    std::stringstream text;
    text << in.rdbuf();
    upstreams = resolv_conf_nameservers(text.str());
  }
  if (upstreams.empty())
    return make_error("config", "outbound_network: no IPv4 nameserver in /etc/resolv.conf; set outbound_resolvers");

  auto out = std::make_unique<Outbound>();
  auto egress = netpolicy::Egress::create(ec);
  if (!egress) return make_error("config", "outbound_network: setting up the egress namespace: " + egress.error().message);
  out->egress_ = std::move(*egress);
  out->resolver_ = std::make_unique<Resolver>(loop, out->egress_->policy(), *subnet, upstreams,
                                              out->egress_->uplink_netns_fd());
  if (auto s = out->resolver_->start(out->egress_->netns_fd()); !s) return s.error();
  log_info("outbound network: egress namespace {} ({} host addresses blocked{}), uplink {}, {} resolver(s)",
           out->egress_->netns_name(), out->egress_->policy().host_addresses.size(),
           ec.test_allowed.empty() ? "" : "; TEST BUILD allows extra destinations",
           config.uplink_netns.empty() ? "the runner's namespace" : config.uplink_netns,
           upstreams.size());
  return out;
}

Expected<sandbox::JobNetworkPlan> Outbound::claim(const std::string& job_id) {
  const uint32_t count = sandbox::slot_count(egress_->subnet());
  for (uint32_t tries = 1; tries < count; ++tries) {
    // Round robin: a slot just freed is reused last, after its old veth is surely gone.
    const uint32_t slot = next_slot_;
    next_slot_ = next_slot_ + 1 >= count ? 1 : next_slot_ + 1;
    bool used = false;
    for (const auto& [id, s] : slots_) used = used || s == slot;
    if (used) continue;
    auto plan = sandbox::plan_job_network(egress_->netns_fd(), egress_->subnet(), slot);
    if (plan) slots_[job_id] = slot;
    return plan;
  }
  return make_error("runner_full", "every outbound network address is in use");
}

void Outbound::release(const std::string& job_id) { slots_.erase(job_id); }

}  // namespace motor::netpolicy
